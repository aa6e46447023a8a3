// Half precision with <hip/hip_fp16.h>: __half/__half2 conversions, packed arithmetic (__hadd2,
// __hmul2, __hfma2), h2rcp/hrcp, h2exp, hsqrt, packed compares, and a half2 dot product with float accumulation.
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>

__global__ void half_axpy(int n, __half a, const __half* __restrict__ x, __half* __restrict__ y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __hfma(a, x[i], y[i]);
}

__global__ void half2_axpy(int n2, __half2 a, const __half2* __restrict__ x, __half2* __restrict__ y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n2) y[i] = __hfma2(a, x[i], y[i]);
}

__global__ void float_to_half_roundtrip(const float* __restrict__ in, __half* __restrict__ h, float* __restrict__ back,
                                        int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const __half v = __float2half(in[i]);
  h[i] = v;
  back[i] = __half2float(v) - __half2float(__float2half_rz(in[i]));
}

// Softmax numerator in half2: exp, reciprocal and max in the packed type.
__global__ void half2_exp_scale(const __half2* __restrict__ x, __half2* __restrict__ y, int n2) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n2) return;
  const __half2 v = x[i];
  // HIP 5.2 has no __hmax2: clamp through the packed compare (1.0/0.0 per lane) and a blend.
  const __half2 lo = __float2half2_rn(-8.0f);
  const __half2 keep = __hge2(v, lo);
  const __half2 m = __hfma2(keep, __hsub2(v, lo), lo);
  const __half2 e = h2exp(__hsub2(m, __float2half2_rn(1.0f)));
  y[i] = __hmul2(e, h2rcp(__hadd2(e, __float2half2_rn(1.0f))));
}

__global__ void half_unary(const __half* __restrict__ x, __half* __restrict__ y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const __half v = __habs(x[i]);
  __half r = hsqrt(v);
  r = __hadd(r, hrcp(__hadd(v, __float2half(1.0f))));
  r = __hadd(r, hlog(__hadd(v, __float2half(1.0f))));
  r = __hadd(r, hsin(v));
  if (__hisnan(r) || __hisinf(r)) r = __float2half(0.0f);
  y[i] = __hgt(r, __float2half(100.0f)) ? __float2half(100.0f) : r;
}

// half2 dot product with float accumulation, block reduced through LDS.
__global__ void half2_dot(const __half2* __restrict__ a, const __half2* __restrict__ b, float* __restrict__ out, int n2) {
  __shared__ float red[256];
  float acc = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n2; i += gridDim.x * blockDim.x) {
    const __half2 p = __hmul2(a[i], b[i]);
    acc += __low2float(p) + __high2float(p);
  }
  red[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, red[0]);
}

// Half values shuffled across the wavefront: HIP 5.2 has no __half overload of __shfl_down, so code
// moves the raw 16 bits through the int overload.
__global__ void half_wave_sum(const __half* __restrict__ x, __half* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  __half v = i < n ? x[i] : __float2half(0.0f);
  for (int off = warpSize / 2; off > 0; off >>= 1) {
    const unsigned short bits = __shfl_down(static_cast<int>(__half_as_ushort(v)), off, warpSize);
    v = __hadd(v, __ushort_as_half(bits));
  }
  if (__lane_id() == 0) out[i / warpSize] = v;
}
