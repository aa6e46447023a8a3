// Cooperative groups on divergent code: `coalesced_threads()`, `labeled_partition`, `binary_partition` and `thread_block_tile::match_any`.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

namespace cg = cooperative_groups;

// Warp-aggregated atomics inside a divergent branch via coalesced_threads().
__global__ void filter_positive(const float* __restrict__ in, int n, float* __restrict__ out, unsigned* __restrict__ count) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = in[i];
  if (v > 0.f) {
    cg::coalesced_group active = cg::coalesced_threads();
    unsigned base = 0;
    if (active.thread_rank() == 0) base = atomicAdd(count, active.size());
    base = active.shfl(base, 0);
    out[base + active.thread_rank()] = v;
  }
}

// Group-by-key sums: labeled_partition splits the warp by key, each group reduces its values.
__global__ void groupby_sum(const int* __restrict__ keys, const float* __restrict__ vals, int n, float* __restrict__ sums,
                            int nkeys) {
  auto warp = cg::tiled_partition<32>(cg::this_thread_block());
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int key = i < n ? (keys[i] % nkeys + nkeys) % nkeys : nkeys;  // out-of-range lanes get their own label
  const float v = i < n ? vals[i] : 0.f;
  cg::coalesced_group same = cg::labeled_partition(warp, key);
  const float s = cg::reduce(same, v, cg::plus<float>());
  if (same.thread_rank() == 0 && key < nkeys) atomicAdd(&sums[key], s);
}

// binary_partition: separate warp lanes by predicate and count inside each part.
__global__ void split_count(const float* __restrict__ in, int n, float threshold, unsigned* __restrict__ below,
                            unsigned* __restrict__ above) {
  auto warp = cg::tiled_partition<32>(cg::this_thread_block());
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const float v = i < n ? in[i] : threshold;
  const bool hi = v >= threshold;
  cg::coalesced_group part = cg::binary_partition(warp, hi);
  if (part.thread_rank() == 0) atomicAdd(hi ? above : below, part.size());
  // match_any on the tile (sm_70+).
  const unsigned same_bucket = warp.match_any(static_cast<int>(v * 4.f));
  if (i < n && __popc(same_bucket) == 32) atomicAdd(above, 0u);
}
