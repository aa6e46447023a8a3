// Single-precision math through ocml: sinf/cosf/sincosf, expf/logf/powf, sqrtf/rsqrtf, erff, tanhf,
// atan2f, and the fast intrinsics (__expf, __sinf, __fdividef, __frsqrt_rn) as HIP code mixes them.
#include <hip/hip_runtime.h>

__global__ void activations(const float* __restrict__ x, float* __restrict__ y, int n, int kind) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  float r;
  switch (kind) {
    case 0: r = 1.0f / (1.0f + expf(-v)); break;                                                 // sigmoid
    case 1: r = tanhf(v); break;                                                                 // tanh
    case 2: r = 0.5f * v * (1.0f + erff(v * 0.70710678f)); break;                                // GELU (erf)
    case 3: r = 0.5f * v * (1.0f + tanhf(0.7978845608f * (v + 0.044715f * v * v * v))); break;  // GELU (tanh)
    case 4: r = v * __frcp_rn(1.0f + __expf(-v)); break;                                         // SiLU, fast
    default: r = log1pf(expf(v)); break;                                                         // softplus
  }
  y[i] = r;
}

// Rotary position embedding: sincosf on a computed angle, powf for the frequency.
__global__ void rotary_embedding(float* __restrict__ q, int seq_len, int head_dim, float base) {
  const int pos = blockIdx.x;
  const int j = threadIdx.x;  // pair index
  if (pos >= seq_len || 2 * j + 1 >= head_dim) return;
  const float inv_freq = powf(base, -2.0f * j / static_cast<float>(head_dim));
  float s, c;
  sincosf(pos * inv_freq, &s, &c);
  float* row = q + static_cast<size_t>(pos) * head_dim;
  const float a = row[2 * j], b = row[2 * j + 1];
  row[2 * j] = a * c - b * s;
  row[2 * j + 1] = a * s + b * c;
}

// Polar/cartesian and vector norms.
__global__ void polar_transform(const float2* __restrict__ xy, float2* __restrict__ rt, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float2 p = xy[i];
  rt[i] = make_float2(sqrtf(p.x * p.x + p.y * p.y), atan2f(p.y, p.x));
}

__global__ void layer_norm_rows(const float* __restrict__ x, float* __restrict__ y, const float* __restrict__ gamma,
                                const float* __restrict__ beta, int cols, float eps) {
  __shared__ float s_mean, s_rstd;
  __shared__ float red[256];
  const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
  float sum = 0.0f, sq = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    sum += row[c];
    sq += row[c] * row[c];
  }
  red[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) s_mean = red[0] / cols;
  __syncthreads();
  red[threadIdx.x] = sq;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) s_rstd = rsqrtf(red[0] / cols - s_mean * s_mean + eps);
  __syncthreads();
  for (int c = threadIdx.x; c < cols; c += blockDim.x)
    y[static_cast<size_t>(blockIdx.x) * cols + c] = (row[c] - s_mean) * s_rstd * gamma[c] + beta[c];
}

__global__ void misc_special(const float* __restrict__ x, float* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = fabsf(x[i]) + 1.0f;
  out[8 * i + 0] = lgammaf(v);
  out[8 * i + 1] = tgammaf(fminf(v, 30.0f));
  out[8 * i + 2] = cbrtf(v) + hypotf(v, 2.0f);
  out[8 * i + 3] = log2f(v) + log10f(v) + exp2f(-v) + exp10f(-v);
  out[8 * i + 4] = fmodf(v * 7.0f, 3.0f) + remainderf(v, 0.5f);
  out[8 * i + 5] = __sinf(v) * __cosf(v) + __fdividef(v, 3.0f);
  out[8 * i + 6] = normcdff(v - 1.0f) + erfcinvf(fminf(v - 1.0f, 1.9f));
  out[8 * i + 7] = fmaf(v, v, -1.0f) + floorf(v) + ceilf(v) + truncf(v) + rintf(v);
}
