// Templated kernels instantiated only by host code: host template functions launch them with the
// triple-chevron syntax and hipLaunchKernelGGL, so the device compile emits exactly the kernels
// the host side uses (no explicit instantiation).
#include <hip/hip_runtime.h>
#include <cstdio>

#define HIP_CHECK(cmd)                                                                                  \
  do {                                                                                                  \
    hipError_t e = (cmd);                                                                               \
    if (e != hipSuccess) {                                                                              \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, hipGetErrorString(e));                         \
      return e;                                                                                         \
    }                                                                                                   \
  } while (0)

template <typename T>
__global__ void fill_kernel(T* __restrict__ p, T value, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) p[i] = value;
}

template <typename T, int Radius>
__global__ void moving_average(const T* __restrict__ in, T* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  T s = T(0);
  int c = 0;
#pragma unroll
  for (int d = -Radius; d <= Radius; ++d) {
    const int j = i + d;
    if (j >= 0 && j < n) {
      s += in[j];
      ++c;
    }
  }
  out[i] = s / T(c);
}

template <typename TIn, typename TOut>
__global__ void convert_kernel(const TIn* __restrict__ in, TOut* __restrict__ out, size_t n) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<TOut>(in[i]);
}

template <typename T>
hipError_t fill(T* d, T value, size_t n, hipStream_t stream) {
  const unsigned int block = 256;
  const unsigned int grid = static_cast<unsigned int>((n + block - 1) / block);
  fill_kernel<T><<<grid, block, 0, stream>>>(d, value, n);
  return hipGetLastError();
}

template <typename T, int Radius>
hipError_t smooth(const T* in, T* out, int n, hipStream_t stream) {
  hipLaunchKernelGGL((moving_average<T, Radius>), dim3((n + 127) / 128), dim3(128), 0, stream, in, out, n);
  return hipGetLastError();
}

template <typename TIn, typename TOut>
hipError_t convert(const TIn* in, TOut* out, size_t n, hipStream_t stream) {
  hipLaunchKernelGGL(HIP_KERNEL_NAME(convert_kernel<TIn, TOut>), dim3((n + 255) / 256), dim3(256), 0, stream, in, out,
                     n);
  return hipGetLastError();
}

hipError_t run_pipeline(size_t n) {
  float *a = nullptr, *b = nullptr;
  double* d = nullptr;
  int* idx = nullptr;
  hipStream_t s;
  HIP_CHECK(hipStreamCreate(&s));
  HIP_CHECK(hipMalloc(&a, n * sizeof(float)));
  HIP_CHECK(hipMalloc(&b, n * sizeof(float)));
  HIP_CHECK(hipMalloc(&d, n * sizeof(double)));
  HIP_CHECK(hipMalloc(&idx, n * sizeof(int)));
  HIP_CHECK(fill<float>(a, 1.0f, n, s));
  HIP_CHECK(fill<int>(idx, 7, n, s));
  HIP_CHECK((smooth<float, 2>(a, b, static_cast<int>(n), s)));
  HIP_CHECK((smooth<float, 8>(b, a, static_cast<int>(n), s)));
  HIP_CHECK((convert<float, double>(a, d, n, s)));
  HIP_CHECK((smooth<double, 4>(d, d, static_cast<int>(n), s)));
  HIP_CHECK((convert<int, float>(idx, b, n, s)));
  HIP_CHECK(hipStreamSynchronize(s));
  HIP_CHECK(hipFree(a));
  HIP_CHECK(hipFree(b));
  HIP_CHECK(hipFree(d));
  HIP_CHECK(hipFree(idx));
  HIP_CHECK(hipStreamDestroy(s));
  return hipSuccess;
}
