// Host code launching kernels with hipLaunchKernelGGL, as the HIP samples (vectoradd_hip.cpp) and
// HIP-Examples write it: hipMalloc/hipMemcpy, HIP_CHECK error handling, events for timing.
#include <hip/hip_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define HIP_CHECK(expression)                                                                                  \
  {                                                                                                            \
    const hipError_t status = (expression);                                                                    \
    if (status != hipSuccess) {                                                                                \
      std::fprintf(stderr, "HIP error %d (%s) at %s:%d\n", status, hipGetErrorString(status), __FILE__, __LINE__); \
      std::exit(EXIT_FAILURE);                                                                                 \
    }                                                                                                          \
  }

#define WIDTH 1024
#define HEIGHT 1024
#define THREADS_PER_BLOCK_X 16
#define THREADS_PER_BLOCK_Y 16

__global__ void vectoradd_float(float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ c,
                                int width, int height) {
  const int x = hipBlockDim_x * hipBlockIdx_x + hipThreadIdx_x;
  const int y = hipBlockDim_y * hipBlockIdx_y + hipThreadIdx_y;
  const int i = y * width + x;
  if (x < width && y < height) a[i] = b[i] + c[i];
}

__global__ void vector_square(const float* __restrict__ in, float* __restrict__ out, size_t n) {
  const size_t offset = hipBlockIdx_x * hipBlockDim_x + hipThreadIdx_x;
  const size_t stride = hipBlockDim_x * hipGridDim_x;
  for (size_t i = offset; i < n; i += stride) out[i] = in[i] * in[i];
}

int main() {
  hipDeviceProp_t props;
  HIP_CHECK(hipGetDeviceProperties(&props, 0));
  std::printf("device: %s (%s), warpSize %d\n", props.name, props.gcnArchName, props.warpSize);

  const size_t n = static_cast<size_t>(WIDTH) * HEIGHT;
  std::vector<float> ha(n), hb(n), hc(n);
  for (size_t i = 0; i < n; ++i) {
    hb[i] = static_cast<float>(i);
    hc[i] = static_cast<float>(i) * 100.0f;
  }

  float *da, *db, *dc;
  HIP_CHECK(hipMalloc(&da, n * sizeof(float)));
  HIP_CHECK(hipMalloc(&db, n * sizeof(float)));
  HIP_CHECK(hipMalloc(&dc, n * sizeof(float)));
  HIP_CHECK(hipMemcpy(db, hb.data(), n * sizeof(float), hipMemcpyHostToDevice));
  HIP_CHECK(hipMemcpy(dc, hc.data(), n * sizeof(float), hipMemcpyHostToDevice));

  hipEvent_t start, stop;
  HIP_CHECK(hipEventCreate(&start));
  HIP_CHECK(hipEventCreate(&stop));
  HIP_CHECK(hipEventRecord(start, nullptr));
  hipLaunchKernelGGL(vectoradd_float, dim3(WIDTH / THREADS_PER_BLOCK_X, HEIGHT / THREADS_PER_BLOCK_Y),
                     dim3(THREADS_PER_BLOCK_X, THREADS_PER_BLOCK_Y), 0, 0, da, db, dc, WIDTH, HEIGHT);
  HIP_CHECK(hipGetLastError());
  hipLaunchKernelGGL(vector_square, dim3(512), dim3(256), 0, 0, da, db, n);
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipEventRecord(stop, nullptr));
  HIP_CHECK(hipEventSynchronize(stop));
  float ms = 0.0f;
  HIP_CHECK(hipEventElapsedTime(&ms, start, stop));

  HIP_CHECK(hipMemcpy(ha.data(), da, n * sizeof(float), hipMemcpyDeviceToHost));
  int errors = 0;
  for (size_t i = 0; i < n; ++i)
    if (ha[i] != hb[i] + hc[i]) ++errors;
  std::printf("%s (%d errors), %.3f ms\n", errors ? "FAILED" : "PASSED", errors, ms);

  HIP_CHECK(hipFree(da));
  HIP_CHECK(hipFree(db));
  HIP_CHECK(hipFree(dc));
  return errors ? EXIT_FAILURE : EXIT_SUCCESS;
}
