// Shared by every kernel of the fixture: launch geometry and a grid-stride loop.
#pragma once
#include <cstddef>

namespace fixture {

constexpr int k_block = 256;

inline int blocks_for(std::size_t n) { return static_cast<int>((n + k_block - 1) / k_block); }

template <typename F>
__device__ void grid_stride(std::size_t n, F f) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) f(i);
}

template <typename T>
__device__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

}  // namespace fixture
