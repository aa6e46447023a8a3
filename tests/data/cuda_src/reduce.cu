// A templated block reduction over dynamic shared memory, instantiated by name expressions, as a
// run-time-compiling library (CuPy's RawModule, Warp) writes one.
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include "ops/functors.cuh"

namespace cg = cooperative_groups;

#ifndef ITEMS_PER_THREAD
#define ITEMS_PER_THREAD 1
#endif

template <typename T, int BLOCK, typename Op>
__global__ void block_reduce(const T* __restrict__ in, T* __restrict__ out, int n) {
  extern __shared__ unsigned char smem_raw[];
  T* smem = reinterpret_cast<T*>(smem_raw);
  cg::thread_block block = cg::this_thread_block();
  Op op;
  T acc = Op::identity();
  int base = blockIdx.x * BLOCK * ITEMS_PER_THREAD + threadIdx.x;
#pragma unroll
  for (int k = 0; k < ITEMS_PER_THREAD; ++k) {
    int i = base + k * BLOCK;
    if (i < n) acc = op(acc, in[i]);
  }
  smem[threadIdx.x] = acc;
  block.sync();
  for (int stride = BLOCK / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) smem[threadIdx.x] = op(smem[threadIdx.x], smem[threadIdx.x + stride]);
    block.sync();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = smem[0];
}

__global__ void scale_half(__half* x, __half a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = __hmul(x[i], a);
}
