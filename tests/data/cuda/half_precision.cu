// Packed half2/bfloat162 arithmetic intrinsics (`__hfma2`, `h2exp`, `__hmax2`, `__hadd2`, conversions) in a fused bias+GELU and an RMSNorm kernel, as in LLM inference code.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

template <typename T2> struct Pack;
template <> struct Pack<__half2> {
  using scalar = __half;
  static __device__ __half2 from_float2(float2 f) { return __float22half2_rn(f); }
  static __device__ float2 to_float2(__half2 h) { return __half22float2(h); }
};
template <> struct Pack<__nv_bfloat162> {
  using scalar = __nv_bfloat16;
  static __device__ __nv_bfloat162 from_float2(float2 f) { return __float22bfloat162_rn(f); }
  static __device__ float2 to_float2(__nv_bfloat162 h) { return __bfloat1622float2(h); }
};

// bias + tanh-GELU on packed pairs; arithmetic in the packed type where it is exact enough.
template <typename T2>
__global__ void bias_gelu_packed(T2* __restrict__ x, const T2* __restrict__ bias, int cols2, int n2) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n2) return;
  T2 v = __hadd2(x[i], bias[i % cols2]);
  const T2 k0 = Pack<T2>::from_float2(make_float2(0.7978845608f, 0.7978845608f));
  const T2 k1 = Pack<T2>::from_float2(make_float2(0.044715f, 0.044715f));
  const T2 half = Pack<T2>::from_float2(make_float2(0.5f, 0.5f));
  const T2 one = Pack<T2>::from_float2(make_float2(1.f, 1.f));
  const T2 inner = __hmul2(k0, __hfma2(__hmul2(k1, v), __hmul2(v, v), v));
  // tanh(u) = 1 - 2 / (exp(2u) + 1), with h2exp/h2rcp in the packed type.
  const T2 e = h2exp(__hadd2(inner, inner));
  const T2 th = __hsub2(one, __hmul2(Pack<T2>::from_float2(make_float2(2.f, 2.f)), h2rcp(__hadd2(e, one))));
  x[i] = __hmul2(__hmul2(half, v), __hadd2(one, th));
}
template __global__ void bias_gelu_packed<__half2>(__half2*, const __half2*, int, int);
template __global__ void bias_gelu_packed<__nv_bfloat162>(__nv_bfloat162*, const __nv_bfloat162*, int, int);

// RMSNorm: one warp per row, packed loads, float accumulation, packed scaling with the weight.
template <typename T2>
__global__ void rmsnorm_packed(const T2* __restrict__ x, const T2* __restrict__ w, T2* __restrict__ y, int cols2, float eps) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const T2* xr = x + size_t(row) * cols2;
  float ss = 0.f;
  for (int c = lane; c < cols2; c += 32) {
    const float2 f = Pack<T2>::to_float2(xr[c]);
    ss += f.x * f.x + f.y * f.y;
  }
  for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
  const float r = rsqrtf(ss / (2 * cols2) + eps);
  const T2 r2 = Pack<T2>::from_float2(make_float2(r, r));
  for (int c = lane; c < cols2; c += 32) y[size_t(row) * cols2 + c] = __hmul2(__hmul2(xr[c], r2), w[c]);
}
template __global__ void rmsnorm_packed<__half2>(const __half2*, const __half2*, __half2*, int, float);
template __global__ void rmsnorm_packed<__nv_bfloat162>(const __nv_bfloat162*, const __nv_bfloat162*, __nv_bfloat162*, int, float);

// Scalar half comparisons, max/min, NaN checks, and atomics on half2 / bfloat162.
__global__ void clip_and_accumulate(const __half* __restrict__ v, __half2* __restrict__ acc_h, __nv_bfloat162* __restrict__ acc_b,
                                    int n, __half lo, __half hi) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  __half h = v[i];
  if (__hisnan(h)) h = __float2half(0.f);
  h = __hmin(__hmax(h, lo), hi);
  const __half2 pair = __halves2half2(h, __hneg(h));
  atomicAdd(&acc_h[i & 255], pair);
  atomicAdd(&acc_b[i & 255], __floats2bfloat162_rn(__half2float(h), 1.f));
}
