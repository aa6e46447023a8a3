// Warp votes and matching: `__ballot_sync`, `__all_sync`, `__any_sync`, `__activemask`, `__match_any_sync`/`__match_all_sync` (sm_70+).
#include <cuda_runtime.h>

// Warp-aggregated atomic increment: lanes with the same key elect a leader with __match_any_sync,
// the leader adds the group's population, and every lane gets its own slot (the classic pattern).
__global__ void aggregated_bucket_insert(const int* __restrict__ keys, int n, int nbuckets, unsigned* __restrict__ fill,
                                         int* __restrict__ slots, int* __restrict__ bucket_items, int cap) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const bool valid = i < n;
  const unsigned active = __ballot_sync(0xffffffffu, valid);
  if (!valid) return;
  const int key = keys[i];
  const int bucket = ((key % nbuckets) + nbuckets) % nbuckets;
  const unsigned peers = __match_any_sync(active, bucket);
  const int leader = __ffs(peers) - 1;
  const int lane = threadIdx.x & 31;
  const int rank = __popc(peers & ((1u << lane) - 1));
  unsigned base = 0;
  if (lane == leader) base = atomicAdd(&fill[bucket], static_cast<unsigned>(__popc(peers)));
  base = __shfl_sync(peers, base, leader);
  const unsigned slot = base + rank;
  slots[i] = static_cast<int>(slot);
  if (slot < static_cast<unsigned>(cap)) bucket_items[bucket * cap + slot] = key;
}

// Early exit when the whole warp converged (__all_sync), flagging warps where any lane diverged.
__global__ void jacobi_sweep(const float* __restrict__ a_diag, const float* __restrict__ rhs, float* __restrict__ x,
                             int n, float tol, int max_iter, unsigned* __restrict__ warp_flags) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const bool in_range = i < n;
  float xi = in_range ? x[i] : 0.f;
  const float d = in_range ? a_diag[i] : 1.f;
  const float b = in_range ? rhs[i] : 0.f;
  int it = 0;
  for (; it < max_iter; ++it) {
    const float left = __shfl_up_sync(0xffffffffu, xi, 1);
    const float right = __shfl_down_sync(0xffffffffu, xi, 1);
    const float nx = (b + 0.25f * (left + right)) / d;
    const bool done = fabsf(nx - xi) < tol;
    xi = nx;
    if (__all_sync(0xffffffffu, done || !in_range)) break;
  }
  if (in_range) x[i] = xi;
  const bool nan_seen = !(xi == xi);
  const unsigned any_nan = __any_sync(0xffffffffu, nan_seen);
  const unsigned hit_limit = __ballot_sync(0xffffffffu, it == max_iter);
  if ((threadIdx.x & 31) == 0) warp_flags[i >> 5] = (any_nan ? 0x80000000u : 0u) | (hit_limit & 0x7fffffffu);
}

// __match_all_sync: detect warps whose lanes all carry the same tag (uniform branch fast path).
__global__ void uniform_tag_fastpath(const unsigned long long* __restrict__ tags, const float* __restrict__ v,
                                     float* __restrict__ out, int n, unsigned* __restrict__ uniform_warps) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned mask = __ballot_sync(0xffffffffu, i < n);
  if (i >= n) return;
  int pred = 0;
  const unsigned long long tag = tags[i];
  const unsigned all = __match_all_sync(mask, tag, &pred);
  if (pred) {
    if ((threadIdx.x & 31) == __ffs(all) - 1) atomicAdd(uniform_warps, 1u);
    out[i] = v[i] * 2.f;
  } else {
    const unsigned same = __match_any_sync(__activemask(), tag);
    out[i] = v[i] * static_cast<float>(__popc(same));
  }
}

// sm_80 warp-wide integer reductions (`redux.sync` through __reduce_*_sync): per-warp min/max/sum/and/or
// of flags and counts, written by lane 0.
__global__ void warp_redux_stats(const unsigned* __restrict__ v, int n, uint4* __restrict__ per_warp, unsigned* __restrict__ bits) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned x = i < n ? v[i] : 0u;
  const unsigned sum = __reduce_add_sync(0xffffffffu, x);
  const unsigned mn = __reduce_min_sync(0xffffffffu, i < n ? x : 0xffffffffu);
  const unsigned mx = __reduce_max_sync(0xffffffffu, x);
  const int smax = __reduce_max_sync(0xffffffffu, static_cast<int>(x) - 1000);
  const unsigned all_and = __reduce_and_sync(0xffffffffu, x);
  const unsigned any_or = __reduce_or_sync(0xffffffffu, x);
  if ((threadIdx.x & 31) == 0) {
    per_warp[i >> 5] = make_uint4(sum, mn, mx, static_cast<unsigned>(smax));
    bits[2 * (i >> 5)] = all_and;
    bits[2 * (i >> 5) + 1] = __reduce_xor_sync(0x0000ffffu, any_or);
  }
}
