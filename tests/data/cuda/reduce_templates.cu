// A templated block reduction explicitly instantiated for 30 (type, op, block size) combinations.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <cfloat>
#include <climits>

namespace red {

template <typename T> struct Acc { using type = T; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };
template <> struct Acc<int8_t> { using type = int; };
template <> struct Acc<uint8_t> { using type = unsigned; };

template <typename T> __device__ __forceinline__ typename Acc<T>::type widen(T v) { return static_cast<typename Acc<T>::type>(v); }
template <> __device__ __forceinline__ float widen<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float widen<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

struct Sum {
  template <typename A> __device__ static A identity() { return A(0); }
  template <typename A> __device__ static A apply(A a, A b) { return a + b; }
};
struct Max {
  template <typename A> __device__ static A identity();
  template <typename A> __device__ static A apply(A a, A b) { return a > b ? a : b; }
};
template <> __device__ float Max::identity<float>() { return -FLT_MAX; }
template <> __device__ double Max::identity<double>() { return -DBL_MAX; }
template <> __device__ int Max::identity<int>() { return INT_MIN; }
template <> __device__ unsigned Max::identity<unsigned>() { return 0u; }
template <> __device__ long long Max::identity<long long>() { return LLONG_MIN; }
template <> __device__ unsigned long long Max::identity<unsigned long long>() { return 0ull; }
struct SumSquares {
  template <typename A> __device__ static A identity() { return A(0); }
  template <typename A> __device__ static A apply(A a, A b) { return a + b; }
  template <typename A> __device__ static A pre(A v) { return v * v; }
};

template <typename Op, typename A> struct Pre { __device__ static A run(A v) { return v; } };
template <typename A> struct Pre<SumSquares, A> { __device__ static A run(A v) { return SumSquares::pre(v); } };

template <typename A>
__device__ __forceinline__ A shfl_down(A v, int off) { return __shfl_down_sync(0xffffffffu, v, off); }

template <typename Op, typename A>
__device__ __forceinline__ A warp_reduce(A v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = Op::apply(v, shfl_down(v, off));
  return v;
}

// Grid-stride load, per-thread accumulation, warp shuffle reduction, then shared memory across warps.
template <typename T, typename Op, int kBlock>
__global__ void __launch_bounds__(kBlock) reduce(const T* __restrict__ in, size_t n, typename Acc<T>::type* __restrict__ partial) {
  using A = typename Acc<T>::type;
  static_assert(kBlock % 32 == 0 && kBlock <= 1024, "block size");
  __shared__ A warp_part[kBlock / 32];
  A acc = Op::template identity<A>();
  for (size_t i = blockIdx.x * size_t(kBlock) + threadIdx.x; i < n; i += size_t(gridDim.x) * kBlock)
    acc = Op::apply(acc, Pre<Op, A>::run(widen(in[i])));
  acc = warp_reduce<Op>(acc);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_part[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < kBlock / 32 ? warp_part[lane] : Op::template identity<A>();
    acc = warp_reduce<Op>(acc);
    if (lane == 0) partial[blockIdx.x] = acc;
  }
}

#define KC_REDUCE(T, OP, B) template __global__ void reduce<T, OP, B>(const T*, size_t, Acc<T>::type*);
KC_REDUCE(float, Sum, 128)
KC_REDUCE(float, Sum, 256)
KC_REDUCE(float, Sum, 512)
KC_REDUCE(float, Sum, 1024)
KC_REDUCE(float, Max, 256)
KC_REDUCE(float, Max, 1024)
KC_REDUCE(float, SumSquares, 256)
KC_REDUCE(double, Sum, 128)
KC_REDUCE(double, Sum, 256)
KC_REDUCE(double, Sum, 512)
KC_REDUCE(double, Max, 256)
KC_REDUCE(double, SumSquares, 512)
KC_REDUCE(int, Sum, 128)
KC_REDUCE(int, Sum, 256)
KC_REDUCE(int, Max, 256)
KC_REDUCE(unsigned, Sum, 256)
KC_REDUCE(unsigned, Max, 512)
KC_REDUCE(long long, Sum, 256)
KC_REDUCE(long long, Max, 256)
KC_REDUCE(unsigned long long, Sum, 256)
KC_REDUCE(unsigned long long, Max, 1024)
KC_REDUCE(__half, Sum, 128)
KC_REDUCE(__half, Sum, 256)
KC_REDUCE(__half, Max, 256)
KC_REDUCE(__half, SumSquares, 512)
KC_REDUCE(__nv_bfloat16, Sum, 256)
KC_REDUCE(__nv_bfloat16, Max, 256)
KC_REDUCE(__nv_bfloat16, SumSquares, 1024)
KC_REDUCE(int8_t, Sum, 256)
KC_REDUCE(uint8_t, Sum, 512)
KC_REDUCE(uint8_t, Max, 128)
#undef KC_REDUCE

}  // namespace red
