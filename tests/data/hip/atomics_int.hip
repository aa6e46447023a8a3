// 32- and 64-bit integer atomics: atomicAdd/Sub/Exch/Min/Max/And/Or/Xor/Inc/Dec/CAS on int,
// unsigned int and unsigned long long, in global memory and in LDS (privatised histogram).
#include <hip/hip_runtime.h>

#define NUM_BINS 256

__global__ void histogram256_lds(const unsigned char* __restrict__ data, unsigned int* __restrict__ bins,
                                 size_t n) {
  __shared__ unsigned int local_bins[NUM_BINS];
  for (int b = threadIdx.x; b < NUM_BINS; b += blockDim.x) local_bins[b] = 0;
  __syncthreads();

  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) atomicAdd(&local_bins[data[i]], 1u);
  __syncthreads();

  for (int b = threadIdx.x; b < NUM_BINS; b += blockDim.x) {
    const unsigned int c = local_bins[b];
    if (c) atomicAdd(&bins[b], c);
  }
}

__global__ void int_atomic_zoo(int* __restrict__ i32, unsigned int* __restrict__ u32, const int* __restrict__ v,
                               int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  if (gid >= n) return;
  const int x = v[gid];
  atomicAdd(&i32[0], x);
  atomicSub(&i32[1], x);
  atomicMin(&i32[2], x);
  atomicMax(&i32[3], x);
  atomicExch(&i32[4], gid);
  atomicAnd(&u32[0], static_cast<unsigned int>(x) | 0xffff0000u);
  atomicOr(&u32[1], 1u << (gid & 31));
  atomicXor(&u32[2], static_cast<unsigned int>(x));
  atomicInc(&u32[3], 1023u);  // wraps to 0 after 1023
  atomicDec(&u32[4], 1023u);
  atomicMin(&u32[5], static_cast<unsigned int>(x));
  atomicMax(&u32[6], static_cast<unsigned int>(x));
  atomicCAS(&i32[5], 0, gid + 1);  // first thread to arrive wins
}

__global__ void u64_atomic_zoo(unsigned long long* __restrict__ acc, const unsigned long long* __restrict__ v,
                               int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  if (gid >= n) return;
  const unsigned long long x = v[gid];
  atomicAdd(&acc[0], x);
  atomicMin(&acc[1], x);
  atomicMax(&acc[2], x);
  atomicAnd(&acc[3], x | 0xffffffff00000000ull);
  atomicOr(&acc[4], 1ull << (gid & 63));
  atomicXor(&acc[5], x);
  atomicExch(&acc[6], x);
  // 64-bit saturating add written as a CAS loop.
  unsigned long long old = acc[7], assumed;
  do {
    assumed = old;
    const unsigned long long sum = assumed + x;
    old = atomicCAS(&acc[7], assumed, sum < assumed ? ~0ull : sum);
  } while (assumed != old);
}

// Work queue: each wave's first active lane reserves a batch of slots with one atomic and broadcasts
// the base with __shfl (wave-aggregated atomics).
__global__ void enqueue_nonzero(const int* __restrict__ in, int* __restrict__ queue, unsigned int* __restrict__ tail,
                                int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  const bool keep = gid < n && in[gid] != 0;
  const unsigned long long mask = __ballot(keep);
  if (!keep) return;
  const int lane = __lane_id();
  const int leader = __ffsll(static_cast<unsigned long long>(mask)) - 1;
  unsigned int base = 0;
  if (lane == leader) base = atomicAdd(tail, static_cast<unsigned int>(__popcll(mask)));
  base = __shfl(base, leader);
  const unsigned int rank = __popcll(mask & ((1ull << lane) - 1));
  queue[base + rank] = in[gid];
}
