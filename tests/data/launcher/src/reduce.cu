#include "launcher/common.cuh"
#include "launcher/kernels.hpp"

namespace {
template <int Block>
__global__ void reduce_kernel(const float* in, float* out, std::size_t n) {
  __shared__ float partial[Block / 32];
  float v = 0;
  fixture::grid_stride(n, [&] __device__(std::size_t i) { v += in[i]; });
  v = fixture::warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < Block / 32 ? partial[threadIdx.x] : 0.f;
    v = fixture::warp_sum(v);
    if (threadIdx.x == 0) atomicAdd(out, v);
  }
}
}  // namespace

void fixture::reduce(const float* in, float* out, std::size_t n) {
  reduce_kernel<k_block><<<blocks_for(n), k_block>>>(in, out, n);
}
