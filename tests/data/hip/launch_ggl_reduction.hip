// ROCm-examples style two-pass reduction driven from host code: hipLaunchKernelGGL with dynamic
// shared memory bytes and a stream, templated on block size, with a host-side dispatch switch.
#include <hip/hip_runtime.h>
#include <cstdio>
#include <vector>

#define HIP_CHECK(condition)                                                                                  \
  do {                                                                                                        \
    hipError_t error = condition;                                                                             \
    if (error != hipSuccess) {                                                                                \
      std::fprintf(stderr, "An error encountered: \"%s\" at %s:%d\n", hipGetErrorString(error), __FILE__,     \
                   __LINE__);                                                                                 \
      return -1;                                                                                              \
    }                                                                                                         \
  } while (0)

template <unsigned int BlockSize>
__global__ void reduce_pass(const float* __restrict__ in, float* __restrict__ out, size_t n) {
  extern __shared__ float shared[];
  const unsigned int tid = threadIdx.x;
  float sum = 0.0f;
  for (size_t i = static_cast<size_t>(blockIdx.x) * BlockSize + tid; i < n; i += static_cast<size_t>(gridDim.x) * BlockSize)
    sum += in[i];
  shared[tid] = sum;
  __syncthreads();
#pragma unroll
  for (unsigned int s = BlockSize / 2; s >= static_cast<unsigned int>(warpSize); s >>= 1) {
    if (tid < s) shared[tid] += shared[tid + s];
    __syncthreads();
  }
  if (tid < static_cast<unsigned int>(warpSize)) {
    sum = shared[tid];
    for (int off = warpSize / 2; off > 0; off >>= 1) sum += __shfl_down(sum, off);
    if (tid == 0) out[blockIdx.x] = sum;
  }
}

template <unsigned int BlockSize>
void launch_reduce(const float* in, float* out, size_t n, unsigned int grid, hipStream_t stream) {
  hipLaunchKernelGGL(reduce_pass<BlockSize>, dim3(grid), dim3(BlockSize), BlockSize * sizeof(float), stream, in, out, n);
}

int reduce_on_device(const std::vector<float>& host, float& result, unsigned int block_size) {
  const size_t n = host.size();
  const unsigned int grid = 1024;
  float *d_in, *d_partial, *d_out;
  hipStream_t stream;
  HIP_CHECK(hipStreamCreateWithFlags(&stream, hipStreamNonBlocking));
  HIP_CHECK(hipMalloc(&d_in, n * sizeof(float)));
  HIP_CHECK(hipMalloc(&d_partial, grid * sizeof(float)));
  HIP_CHECK(hipMalloc(&d_out, sizeof(float)));
  HIP_CHECK(hipMemcpyAsync(d_in, host.data(), n * sizeof(float), hipMemcpyHostToDevice, stream));

  switch (block_size) {
    case 64: launch_reduce<64>(d_in, d_partial, n, grid, stream); launch_reduce<64>(d_partial, d_out, grid, 1, stream); break;
    case 256: launch_reduce<256>(d_in, d_partial, n, grid, stream); launch_reduce<256>(d_partial, d_out, grid, 1, stream); break;
    default: launch_reduce<1024>(d_in, d_partial, n, grid, stream); launch_reduce<1024>(d_partial, d_out, grid, 1, stream); break;
  }
  HIP_CHECK(hipGetLastError());
  HIP_CHECK(hipMemcpyAsync(&result, d_out, sizeof(float), hipMemcpyDeviceToHost, stream));
  HIP_CHECK(hipStreamSynchronize(stream));
  HIP_CHECK(hipFree(d_in));
  HIP_CHECK(hipFree(d_partial));
  HIP_CHECK(hipFree(d_out));
  HIP_CHECK(hipStreamDestroy(stream));
  return 0;
}
