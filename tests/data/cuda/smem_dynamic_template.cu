// Templated kernels using dynamic shared memory through a CUTLASS/CUB-style SharedStorage reinterpret_cast helper.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdint>

namespace detail {

// Like cutlass::SharedStorage / cub::Uninitialized: one untyped dynamic buffer, typed per kernel.
template <typename T>
__device__ __forceinline__ T* dynamic_smem() {
  extern __shared__ __align__(16) unsigned char smem_buffer[];
  return reinterpret_cast<T*>(smem_buffer);
}

template <typename T, int kBlock, int kItems>
struct BlockLoadStorage {
  T items[kBlock * kItems];
  int valid;
};

template <typename T>
struct Plus {
  __device__ T operator()(const T& a, const T& b) const { return a + b; }
};

template <>
struct Plus<__half> {
  __device__ __half operator()(const __half& a, const __half& b) const { return __hadd(a, b); }
};

template <>
struct Plus<int2> {
  __device__ int2 operator()(const int2& a, const int2& b) const { return make_int2(a.x + b.x, a.y + b.y); }
};

}  // namespace detail

// Block-wide inclusive scan (Hillis-Steele in shared memory) of kItems per thread, storage from the
// dynamic buffer.
template <typename T, int kBlock, int kItems>
__global__ void __launch_bounds__(kBlock) block_scan(const T* __restrict__ in, T* __restrict__ out, int n) {
  using Storage = detail::BlockLoadStorage<T, kBlock, kItems>;
  Storage& st = *detail::dynamic_smem<Storage>();
  T* scratch = reinterpret_cast<T*>(&st + 1);  // kBlock partial sums after the storage
  detail::Plus<T> op;
  const int base = blockIdx.x * kBlock * kItems;
  if (threadIdx.x == 0) st.valid = min(kBlock * kItems, n - base);
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int idx = i * kBlock + threadIdx.x;
    if (idx < st.valid) st.items[idx] = in[base + idx];
    else st.items[idx] = T{};
  }
  __syncthreads();
  // Thread-local sequential scan of its kItems consecutive items.
  T run = st.items[threadIdx.x * kItems];
#pragma unroll
  for (int i = 1; i < kItems; ++i) {
    run = op(run, st.items[threadIdx.x * kItems + i]);
    st.items[threadIdx.x * kItems + i] = run;
  }
  scratch[threadIdx.x] = run;
  __syncthreads();
  for (unsigned off = 1; off < kBlock; off <<= 1) {
    T v = threadIdx.x >= off ? scratch[threadIdx.x - off] : T{};
    __syncthreads();
    if (threadIdx.x >= off) scratch[threadIdx.x] = op(scratch[threadIdx.x], v);
    __syncthreads();
  }
  const T prefix = threadIdx.x > 0 ? scratch[threadIdx.x - 1] : T{};
#pragma unroll
  for (int i = 0; i < kItems; ++i) {
    const int local = threadIdx.x * kItems + i;
    if (local < st.valid) out[base + local] = threadIdx.x > 0 ? op(prefix, st.items[local]) : st.items[local];
  }
}

template __global__ void block_scan<float, 128, 4>(const float*, float*, int);
template __global__ void block_scan<double, 128, 2>(const double*, double*, int);
template __global__ void block_scan<int, 256, 4>(const int*, int*, int);
template __global__ void block_scan<__half, 256, 8>(const __half*, __half*, int);
template __global__ void block_scan<int2, 64, 4>(const int2*, int2*, int);
template __global__ void block_scan<unsigned long long, 128, 2>(const unsigned long long*, unsigned long long*, int);
