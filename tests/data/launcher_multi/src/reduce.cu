#include "multi.cuh"

namespace {
constexpr int k_block = 256;
}

__device__ float square(float v) { return v * v; }

__global__ void squares_kernel(const float* x, float* partial, std::size_t n) {
  __shared__ float sums[k_block];
  std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  sums[threadIdx.x] = i < n ? square(x[i]) : 0.0f;
  __syncthreads();
  for (int s = k_block / 2; s > 0; s /= 2) {
    if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

float sum_of_squares(const float* x, std::size_t n) {
  unsigned blocks = static_cast<unsigned>((n + k_block - 1) / k_block);
  float* partial = nullptr;
  if (cudaMalloc(&partial, blocks * sizeof(float)) != cudaSuccess) return -1;
  squares_kernel<<<blocks, k_block>>>(x, partial, n);
  float first = 0;
  cudaMemcpy(&first, partial, sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(partial);
  return first;
}
