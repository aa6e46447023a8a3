// Elementwise math through ocml, as HIP code reaches it via <hip/hip_runtime.h>'s sinf, expf,
// powf: functors applied by one device template, with extern "C" kernels a host loader finds by
// plain name, and one double-precision kernel template instantiated explicitly.
#include "hip_minimal.h"

struct Gelu {  // tanh approximation, as in transformer inference code
  __device__ float operator()(float x) const {
    const float k = 0.7978845608f;  // sqrt(2 / pi)
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
  }
};

struct Softplus {
  __device__ float operator()(float x) const { return x > 20.0f ? x : logf(1.0f + expf(x)); }
};

struct Wave {
  float frequency;
  __device__ float operator()(float x) const { return sinf(frequency * x) * cosf(x) + sqrtf(x * x + 1.0f); }
};

struct PowGamma {
  float gamma;
  __device__ float operator()(float x) const { return powf(fmaxf(x, 0.0f), gamma); }
};

template <typename Op>
__device__ __forceinline__ void map_elements(const float* __restrict__ in, float* __restrict__ out, unsigned n, Op op) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = op(in[i]);
}

extern "C" {
__global__ void gelu_f32(const float* in, float* out, unsigned n) { map_elements(in, out, n, Gelu{}); }
__global__ void softplus_f32(const float* in, float* out, unsigned n) { map_elements(in, out, n, Softplus{}); }
__global__ void wave_f32(const float* in, float* out, unsigned n, float frequency) {
  map_elements(in, out, n, Wave{frequency});
}
__global__ void pow_gamma_f32(const float* in, float* out, unsigned n, float gamma) {
  map_elements(in, out, n, PowGamma{gamma});
}
}

// Damped oscillation in double precision: sin, exp and pow from ocml's f64 set.
template <typename T>
__global__ void damped_oscillation(T* __restrict__ out, unsigned n, T dt, T decay) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  T t = dt * T(i);
  out[i] = exp(-decay * t) * sin(T(6.283185307179586) * t) + pow(t, T(0.5)) * T(1e-3);
}

template __global__ void damped_oscillation<double>(double*, unsigned, double, double);
