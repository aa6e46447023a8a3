// The part of HIP's device API the AMD test kernels use, declared with clang's own attributes and
// builtins, so the corpus compiles with -nogpuinc -nogpulib and no HIP headers installed.
// Each definition follows what hip/amd_detail and clang's __clang_hip_*.h headers do.
#pragma once

#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __constant__ __attribute__((constant))
#define __launch_bounds__(max_threads) __attribute__((amdgpu_flat_work_group_size(1, max_threads)))
#define __forceinline__ inline __attribute__((always_inline))
#define HIP_DYNAMIC_SHARED(type, var) extern __shared__ __attribute__((aligned(16))) type var[];

// threadIdx, blockIdx, blockDim, gridDim: read-only properties, as in HIP, over the builtins.
#define KCACHE_HIP_BUILTIN_DIM(type_name, var_name, get_x, get_y, get_z)       \
  struct type_name {                                                           \
    __declspec(property(get = fetch_x)) unsigned int x;                        \
    __declspec(property(get = fetch_y)) unsigned int y;                        \
    __declspec(property(get = fetch_z)) unsigned int z;                        \
    static __device__ __forceinline__ unsigned int fetch_x() { return get_x; } \
    static __device__ __forceinline__ unsigned int fetch_y() { return get_y; } \
    static __device__ __forceinline__ unsigned int fetch_z() { return get_z; } \
  };                                                                           \
  extern const __device__ __attribute__((weak)) type_name var_name;

KCACHE_HIP_BUILTIN_DIM(hip_thread_idx, threadIdx, __builtin_amdgcn_workitem_id_x(), __builtin_amdgcn_workitem_id_y(),
                       __builtin_amdgcn_workitem_id_z())
KCACHE_HIP_BUILTIN_DIM(hip_block_idx, blockIdx, __builtin_amdgcn_workgroup_id_x(), __builtin_amdgcn_workgroup_id_y(),
                       __builtin_amdgcn_workgroup_id_z())
KCACHE_HIP_BUILTIN_DIM(hip_block_dim, blockDim, __builtin_amdgcn_workgroup_size_x(),
                       __builtin_amdgcn_workgroup_size_y(), __builtin_amdgcn_workgroup_size_z())
// gridDim counts workgroups; the grid size is in work-items, and the last workgroup may be partial.
KCACHE_HIP_BUILTIN_DIM(
    hip_grid_dim, gridDim,
    (__builtin_amdgcn_grid_size_x() + __builtin_amdgcn_workgroup_size_x() - 1) / __builtin_amdgcn_workgroup_size_x(),
    (__builtin_amdgcn_grid_size_y() + __builtin_amdgcn_workgroup_size_y() - 1) / __builtin_amdgcn_workgroup_size_y(),
    (__builtin_amdgcn_grid_size_z() + __builtin_amdgcn_workgroup_size_z() - 1) / __builtin_amdgcn_workgroup_size_z())
#undef KCACHE_HIP_BUILTIN_DIM

#define warpSize __builtin_amdgcn_wavefrontsize()

// Synchronisation, as hip/amd_detail/amd_device_functions.h defines it.
static __device__ __forceinline__ void __syncthreads() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}
static __device__ __forceinline__ void __threadfence() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent"); }

// Atomics: HIP's device-scope (agent) relaxed read-modify-writes.
template <typename T>
static __device__ __forceinline__ T atomicAdd(T* address, T value) {
  return __hip_atomic_fetch_add(address, value, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
template <typename T>
static __device__ __forceinline__ T atomicMax(T* address, T value) {
  return __hip_atomic_fetch_max(address, value, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
template <typename T>
static __device__ __forceinline__ T atomicCAS(T* address, T compare, T value) {
  __hip_atomic_compare_exchange_strong(address, &compare, value, __ATOMIC_RELAXED, __ATOMIC_RELAXED,
                                       __HIP_MEMORY_SCOPE_AGENT);
  return compare;
}
static __device__ __forceinline__ unsigned int __float_as_uint(float x) { return __builtin_bit_cast(unsigned int, x); }
static __device__ __forceinline__ float __uint_as_float(unsigned int x) { return __builtin_bit_cast(float, x); }

// Math through the ROCm device library ocml, as clang's __clang_hip_math.h maps it.
extern "C" {
__device__ __attribute__((const)) float __ocml_sin_f32(float);
__device__ __attribute__((const)) float __ocml_cos_f32(float);
__device__ __attribute__((const)) float __ocml_exp_f32(float);
__device__ __attribute__((const)) float __ocml_log_f32(float);
__device__ __attribute__((const)) float __ocml_sqrt_f32(float);
__device__ __attribute__((const)) float __ocml_rsqrt_f32(float);
__device__ __attribute__((pure)) float __ocml_pow_f32(float, float);
__device__ __attribute__((const)) float __ocml_tanh_f32(float);
__device__ __attribute__((const)) float __ocml_erf_f32(float);
__device__ __attribute__((const)) double __ocml_sin_f64(double);
__device__ __attribute__((const)) double __ocml_exp_f64(double);
__device__ __attribute__((pure)) double __ocml_pow_f64(double, double);
}

static __device__ __forceinline__ float sinf(float x) { return __ocml_sin_f32(x); }
static __device__ __forceinline__ float cosf(float x) { return __ocml_cos_f32(x); }
static __device__ __forceinline__ float expf(float x) { return __ocml_exp_f32(x); }
static __device__ __forceinline__ float logf(float x) { return __ocml_log_f32(x); }
static __device__ __forceinline__ float sqrtf(float x) { return __ocml_sqrt_f32(x); }
static __device__ __forceinline__ float rsqrtf(float x) { return __ocml_rsqrt_f32(x); }
static __device__ __forceinline__ float powf(float x, float y) { return __ocml_pow_f32(x, y); }
static __device__ __forceinline__ float tanhf(float x) { return __ocml_tanh_f32(x); }
static __device__ __forceinline__ float erff(float x) { return __ocml_erf_f32(x); }
static __device__ __forceinline__ double sin(double x) { return __ocml_sin_f64(x); }
static __device__ __forceinline__ double exp(double x) { return __ocml_exp_f64(x); }
static __device__ __forceinline__ double pow(double x, double y) { return __ocml_pow_f64(x, y); }
static __device__ __forceinline__ float fmaxf(float x, float y) { return __builtin_fmaxf(x, y); }
