// Double-precision math through ocml: sqrt, exp, log, pow, erfc, sin/cos, log1p/expm1, cbrt, hypot,
// in Black-Scholes option pricing, an n-body step, and a Horner/Kahan summation.
#include <hip/hip_runtime.h>

__device__ inline double cnd(double d) {
  return 0.5 * erfc(-d * M_SQRT1_2);
}

__global__ void black_scholes_f64(const double* __restrict__ S, const double* __restrict__ K,
                                  const double* __restrict__ T, double r, double sigma, double* __restrict__ call,
                                  double* __restrict__ put, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const double sqrtT = sqrt(T[i]);
  const double d1 = (log(S[i] / K[i]) + (r + 0.5 * sigma * sigma) * T[i]) / (sigma * sqrtT);
  const double d2 = d1 - sigma * sqrtT;
  const double expRT = exp(-r * T[i]);
  call[i] = S[i] * cnd(d1) - K[i] * expRT * cnd(d2);
  put[i] = K[i] * expRT * cnd(-d2) - S[i] * cnd(-d1);
}

struct Body {
  double x, y, z, m;
};

__global__ void nbody_accel_f64(const Body* __restrict__ bodies, double3* __restrict__ acc, int n, double soft2) {
  __shared__ Body tile[128];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const Body me = i < n ? bodies[i] : Body{0, 0, 0, 0};
  double ax = 0, ay = 0, az = 0;
  for (int t = 0; t < n; t += 128) {
    if (t + threadIdx.x < n) tile[threadIdx.x] = bodies[t + threadIdx.x];
    __syncthreads();
    const int lim = min(128, n - t);
    for (int j = 0; j < lim; ++j) {
      const double dx = tile[j].x - me.x, dy = tile[j].y - me.y, dz = tile[j].z - me.z;
      const double r2 = dx * dx + dy * dy + dz * dz + soft2;
      const double inv = rsqrt(r2);
      const double s = tile[j].m * inv * inv * inv;
      ax += dx * s;
      ay += dy * s;
      az += dz * s;
    }
    __syncthreads();
  }
  if (i < n) acc[i] = make_double3(ax, ay, az);
}

__global__ void special_f64(const double* __restrict__ x, double* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const double v = x[i];
  double s, c;
  sincos(v, &s, &c);
  out[6 * i + 0] = pow(fabs(v) + 1.0, 1.0 / 3.0) - cbrt(fabs(v) + 1.0);
  out[6 * i + 1] = log1p(fabs(v)) + expm1(-fabs(v));
  out[6 * i + 2] = s * s + c * c;
  out[6 * i + 3] = hypot(v, 1.0) + atan2(v, 1.0) + asinh(v);
  out[6 * i + 4] = tgamma(fmin(fabs(v) + 0.5, 20.0)) + lgamma(fabs(v) + 0.5);
  out[6 * i + 5] = fma(v, v, -1.0) + ldexp(v, 3) + scalbn(v, -2) + copysign(1.0, v);
}

// Kahan-compensated dot product, one partial per block.
__global__ void kahan_dot_f64(const double* __restrict__ a, const double* __restrict__ b, double* __restrict__ partial,
                              int n) {
  __shared__ double sums[256];
  __shared__ double comps[256];
  double sum = 0.0, comp = 0.0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const double yv = a[i] * b[i] - comp;
    const double t = sum + yv;
    comp = (t - sum) - yv;
    sum = t;
  }
  sums[threadIdx.x] = sum;
  comps[threadIdx.x] = comp;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0, c = 0.0;
    for (unsigned int k = 0; k < blockDim.x; ++k) {
      const double yv = sums[k] - comps[k] - c;
      const double t = s + yv;
      c = (t - s) - yv;
      s = t;
    }
    partial[blockIdx.x] = s;
  }
}
