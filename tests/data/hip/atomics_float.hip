// Floating-point atomics: atomicAdd on float and double (global and LDS), unsafeAtomicAdd, and the
// atomicCAS loops real code writes for float max, double max and double multiply.
#include <hip/hip_runtime.h>

__device__ inline float atomic_max_float(float* addr, float value) {
  // Classic int-reinterpretation trick: valid for non-negative floats, fallback CAS otherwise.
  if (value >= 0.0f) return __int_as_float(atomicMax(reinterpret_cast<int*>(addr), __float_as_int(value)));
  return __uint_as_float(atomicMin(reinterpret_cast<unsigned int*>(addr), __float_as_uint(value)));
}

__device__ inline double atomic_max_double(double* addr, double value) {
  unsigned long long* p = reinterpret_cast<unsigned long long*>(addr);
  unsigned long long old = *p, assumed;
  do {
    assumed = old;
    if (__longlong_as_double(assumed) >= value) break;
    old = atomicCAS(p, assumed, static_cast<unsigned long long>(__double_as_longlong(value)));
  } while (assumed != old);
  return __longlong_as_double(old);
}

__device__ inline double atomic_mul_double(double* addr, double factor) {
  unsigned long long* p = reinterpret_cast<unsigned long long*>(addr);
  unsigned long long old = *p, assumed;
  do {
    assumed = old;
    old = atomicCAS(p, assumed,
                    static_cast<unsigned long long>(__double_as_longlong(__longlong_as_double(assumed) * factor)));
  } while (assumed != old);
  return __longlong_as_double(old);
}

__global__ void scatter_add_f32(const float* __restrict__ vals, const int* __restrict__ idx, float* __restrict__ out,
                                int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  if (gid < n) atomicAdd(&out[idx[gid]], vals[gid]);
}

__global__ void scatter_add_f64(const double* __restrict__ vals, const int* __restrict__ idx,
                                double* __restrict__ out, int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  if (gid < n) atomicAdd(&out[idx[gid]], vals[gid]);
}

// Block-local float accumulation in LDS, then one global unsafeAtomicAdd per block (hardware FP
// atomics on gfx90a/gfx942 coarse-grained memory).
__global__ void dot_product_atomic(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ result,
                                   int n) {
  __shared__ float block_acc;
  if (threadIdx.x == 0) block_acc = 0.0f;
  __syncthreads();
  float local = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) local += x[i] * y[i];
  atomicAdd(&block_acc, local);
  __syncthreads();
  if (threadIdx.x == 0) unsafeAtomicAdd(result, block_acc);
}

__global__ void norms_f64(const double* __restrict__ v, double* __restrict__ stats, int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  if (gid >= n) return;
  const double a = fabs(v[gid]);
  atomicAdd(&stats[0], a);          // L1
  atomicAdd(&stats[1], a * a);      // L2^2
  atomic_max_double(&stats[2], a);  // Linf
  atomic_mul_double(&stats[3], 1.0 + a * 1e-9);
}

__global__ void max_abs_f32(const float* __restrict__ v, float* __restrict__ out, int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  if (gid < n) atomic_max_float(out, fabsf(v[gid]));
}
