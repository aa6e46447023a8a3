// CUDA math library calls that clang lowers to libdevice (`__nv_*`): special functions in float and double, fast-math intrinsics, sincospi, Bessel, gamma, erfinv, remquo.
#include <cuda_runtime.h>

// Black-Scholes with the normal CDF (erfc), the usual libdevice-heavy benchmark.
__device__ __forceinline__ float cnd(float d) { return 0.5f * erfcf(-d * 0.70710678f); }

__global__ void black_scholes(const float* __restrict__ s, const float* __restrict__ k, const float* __restrict__ t, float r,
                              float v, float* __restrict__ call, float* __restrict__ put, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float sq = sqrtf(t[i]);
  const float d1 = (logf(s[i] / k[i]) + (r + 0.5f * v * v) * t[i]) / (v * sq);
  const float d2 = d1 - v * sq;
  const float e = expf(-r * t[i]);
  call[i] = s[i] * cnd(d1) - k[i] * e * cnd(d2);
  put[i] = k[i] * e * cnd(-d2) - s[i] * cnd(-d1);
}

// Double-precision special functions (each is a separate libdevice routine).
__global__ void special_d(const double* __restrict__ x, double* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const double v = x[i];
  double sp, cp;
  sincospi(v, &sp, &cp);
  int quo;
  const double rq = remquo(v, 0.75, &quo);
  out[8 * i + 0] = lgamma(fabs(v) + 1.0) + tgamma(fmin(fabs(v), 20.0) + 0.5);
  out[8 * i + 1] = j0(v) + j1(v) + y0(fabs(v) + 1e-3) + jn(3, v);
  out[8 * i + 2] = erfinv(fmax(fmin(v, 0.999), -0.999)) + erfcinv(fmin(fabs(v), 1.999) + 1e-6) + normcdfinv(0.5 + 0.4 * tanh(v));
  out[8 * i + 3] = cbrt(v) + rcbrt(fabs(v) + 1.0) + hypot(v, 2.0) + rhypot(v, 3.0) + norm3d(v, 1.0, 2.0);
  out[8 * i + 4] = pow(fabs(v) + 1.0, 1.0 / 3.0) + exp10(fmin(v, 10.0)) + expm1(v * 1e-3) + log1p(fabs(v)) + log2(fabs(v) + 2.0);
  out[8 * i + 5] = atan2(v, 1.5) + asinh(v) + acosh(fabs(v) + 1.0) + atanh(tanh(v * 0.1)) + sp * cp;
  out[8 * i + 6] = rq + quo + fma(v, v, -1.0) + ldexp(v, 3) + scalbn(v, -2) + logb(fabs(v) + 1.0) + ilogb(fabs(v) + 1.0);
  out[8 * i + 7] = cyl_bessel_i0(fmin(fabs(v), 50.0)) + cyl_bessel_i1(fmin(fabs(v), 50.0)) + erfcx(v);
}

// Float versions including the fast intrinsics (__expf, __sinf, __fdividef, __saturatef) and
// rounding-mode intrinsics (__fadd_rz, __fmul_ru, __fmaf_rd).
__global__ void special_f(const float* __restrict__ x, float* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  float s, c;
  int e2;
  __sincosf(v, &s, &c);
  out[6 * i + 0] = __expf(v) + __logf(fabsf(v) + 1.f) + __powf(fabsf(v), 0.5f) + __fdividef(v, 3.f) + __saturatef(v);
  out[6 * i + 1] = s * c + __tanf(v * 0.1f) + rsqrtf(fabsf(v) + 1.f) + __frsqrt_rn(fabsf(v) + 2.f);
  out[6 * i + 2] = __fadd_rz(v, 1.f) + __fmul_ru(v, 3.f) + __fmaf_rd(v, v, 1.f) + __fdiv_rn(v, 7.f) + __fsqrt_ru(fabsf(v));
  out[6 * i + 3] = lgammaf(fabsf(v) + 1.f) + erfinvf(fmaxf(fminf(v, 0.99f), -0.99f)) + j0f(v) + y1f(fabsf(v) + 0.5f);
  out[6 * i + 4] = sinpif(v) + cospif(v) + exp2f(v) + exp10f(fminf(v, 5.f)) + log10f(fabsf(v) + 1.f) + modff(v, &s) + s;
  out[6 * i + 5] = normcdff(v) + normf(3, out + 6 * i) + fdimf(v, 1.f) + copysignf(2.f, v) + nextafterf(v, 0.f) + frexpf(v, &e2) + float(e2);
}
