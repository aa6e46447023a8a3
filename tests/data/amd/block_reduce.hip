// Block reductions, the way HIP projects (rocPRIM-style, hipified CUDA samples) write them: a
// template over the element type and block size, a static __shared__ buffer, a tree reduction
// to one value per block, then a device-wide atomicAdd. Explicit instantiations give the mangled
// kernel names the host side launches.
#include "hip_minimal.h"

template <typename T>
struct Sum {
  __device__ T operator()(T a, T b) const { return a + b; }
  static constexpr T identity = T(0);
};

template <typename T>
struct Max {
  __device__ T operator()(T a, T b) const { return a > b ? a : b; }
  static constexpr T identity = T(-1e30);
};

// Reduces one value per thread to one value for the block (valid in thread 0).
template <typename T, unsigned BlockSize, typename Op>
__device__ T block_reduce(T value, Op op) {
  __shared__ T partial[BlockSize];
  unsigned tid = threadIdx.x;
  partial[tid] = value;
  __syncthreads();
#pragma unroll
  for (unsigned stride = BlockSize / 2; stride > 0; stride /= 2) {
    if (tid < stride) partial[tid] = op(partial[tid], partial[tid + stride]);
    __syncthreads();
  }
  return partial[0];
}

template <typename T, unsigned BlockSize>
__global__ __launch_bounds__(BlockSize) void reduce_sum(const T* __restrict__ in, T* __restrict__ out, unsigned n) {
  T acc = Sum<T>::identity;
  // Grid-stride accumulation before the block reduction.
  for (unsigned i = blockIdx.x * BlockSize + threadIdx.x; i < n; i += gridDim.x * BlockSize) acc += in[i];
  T block_total = block_reduce<T, BlockSize>(acc, Sum<T>());
  if (threadIdx.x == 0) atomicAdd(out, block_total);
}

template <typename T, unsigned BlockSize>
__global__ __launch_bounds__(BlockSize) void reduce_max_per_block(const T* __restrict__ in, T* __restrict__ block_max,
                                                                  unsigned n) {
  unsigned i = blockIdx.x * BlockSize + threadIdx.x;
  T value = i < n ? in[i] : Max<T>::identity;
  T m = block_reduce<T, BlockSize>(value, Max<T>());
  if (threadIdx.x == 0) block_max[blockIdx.x] = m;
}

template __global__ void reduce_sum<float, 256>(const float*, float*, unsigned);
template __global__ void reduce_sum<double, 128>(const double*, double*, unsigned);
template __global__ void reduce_sum<int, 256>(const int*, int*, unsigned);
template __global__ void reduce_max_per_block<float, 512>(const float*, float*, unsigned);
