#include "launcher/common.cuh"
#include "launcher/kernels.hpp"

namespace {
__global__ void histogram_kernel(const unsigned char* in, unsigned* bins, std::size_t n) {
  __shared__ unsigned local[256];
  for (int b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  fixture::grid_stride(n, [&] __device__(std::size_t i) { atomicAdd(&local[in[i]], 1u); });
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x) atomicAdd(&bins[b], local[b]);
}
}  // namespace

void fixture::histogram(const unsigned char* in, unsigned* bins, std::size_t n) {
  histogram_kernel<<<blocks_for(n), k_block>>>(in, bins, n);
}
