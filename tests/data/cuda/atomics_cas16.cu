// 16-bit `atomicCAS` on `unsigned short` (sm_70+): CAS loops for half/bfloat16 max and saturating uint16 counters.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>

__device__ __forceinline__ unsigned short half_bits(__half h) { return __half_as_ushort(h); }

// atomicMax for __half via a 16-bit CAS loop (NaN-free inputs).
__device__ __half atomic_max_half(__half* addr, __half val) {
  unsigned short* p = reinterpret_cast<unsigned short*>(addr);
  unsigned short old = *p, assumed;
  do {
    assumed = old;
    if (__hge(__ushort_as_half(assumed), val)) break;
    old = atomicCAS(p, assumed, half_bits(val));
  } while (old != assumed);
  return __ushort_as_half(old);
}

// atomic multiply for bfloat16 (no hardware instruction exists): CAS loop on the 16-bit word.
__device__ __nv_bfloat16 atomic_mul_bf16(__nv_bfloat16* addr, __nv_bfloat16 val) {
  unsigned short* p = reinterpret_cast<unsigned short*>(addr);
  unsigned short old = *p, assumed;
  do {
    assumed = old;
    const __nv_bfloat16 cur = __ushort_as_bfloat16(assumed);
    const __nv_bfloat16 next = __float2bfloat16_rn(__bfloat162float(cur) * __bfloat162float(val));
    old = atomicCAS(p, assumed, __bfloat16_as_ushort(next));
  } while (old != assumed);
  return __ushort_as_bfloat16(old);
}

// Saturating 16-bit increment: never wraps past 0xffff.
__device__ unsigned short atomic_inc_sat_u16(unsigned short* p) {
  unsigned short old = *p, assumed;
  do {
    assumed = old;
    if (assumed == 0xffffu) return assumed;
    old = atomicCAS(p, assumed, static_cast<unsigned short>(assumed + 1u));
  } while (old != assumed);
  return old;
}

__global__ void segment_max_half(const __half* __restrict__ v, const int* __restrict__ seg, int n, __half* __restrict__ seg_max) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomic_max_half(&seg_max[seg[i]], v[i]);
}

__global__ void decay_bf16(__nv_bfloat16* __restrict__ weights, const int* __restrict__ touched, int n, float factor) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomic_mul_bf16(&weights[touched[i]], __float2bfloat16_rn(factor));
}

// A 16-bit count-min sketch (4 rows) with saturating counters.
__global__ void count_min_u16(const unsigned* __restrict__ keys, int n, unsigned short* __restrict__ sketch, int width) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const unsigned k = keys[i];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    unsigned h = k * (0x9e3779b1u + 2u * r) ^ (k >> (13 + r));
    atomic_inc_sat_u16(&sketch[r * width + (h % static_cast<unsigned>(width))]);
  }
}

// 16-bit CAS on shared memory (first claimant owns a slot), published to global memory with another 16-bit CAS.
__global__ void shared_u16_locks(unsigned short* __restrict__ owners, const int* __restrict__ want, int n) {
  __shared__ unsigned short s_owner[64];
  if (threadIdx.x < 64) s_owner[threadIdx.x] = 0xffffu;
  __syncthreads();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const int slot = want[i] & 63;
    atomicCAS(&s_owner[slot], static_cast<unsigned short>(0xffffu), static_cast<unsigned short>(threadIdx.x));
  }
  __syncthreads();
  if (threadIdx.x < 64)
    atomicCAS(&owners[blockIdx.x * 64 + threadIdx.x], static_cast<unsigned short>(0), s_owner[threadIdx.x]);
}
