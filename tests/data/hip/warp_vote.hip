// Wavefront votes: __ballot (64-bit mask on both wave sizes), __any, __all, __activemask-style
// masks with __popcll/__ffsll, used for stream compaction and early-exit search.
#include <hip/hip_runtime.h>

// Lanes below the current one, for either wave size.
__device__ inline unsigned long long lanemask_lt() {
  const unsigned int lane = __lane_id();
  return lane == 0 ? 0ull : (~0ull >> (64 - lane));
}

// Stream compaction inside a block: ballot + popcount within a wave, wave offsets via LDS.
__global__ void compact_positive(const float* __restrict__ in, float* __restrict__ out, unsigned int* __restrict__ count,
                                 int n) {
  __shared__ unsigned int wave_count[1024 / 32];
  __shared__ unsigned int block_base;
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  const int wid = threadIdx.x / warpSize;
  const int nwaves = (blockDim.x + warpSize - 1) / warpSize;

  const float v = gid < n ? in[gid] : 0.0f;
  const bool pred = v > 0.0f;
  const unsigned long long ballot = __ballot(pred);
  const unsigned int rank = __popcll(ballot & lanemask_lt());
  if (__lane_id() == 0) wave_count[wid] = __popcll(ballot);
  __syncthreads();

  if (threadIdx.x == 0) {
    unsigned int total = 0;
    for (int w = 0; w < nwaves; ++w) {
      const unsigned int c = wave_count[w];
      wave_count[w] = total;
      total += c;
    }
    block_base = atomicAdd(count, total);
  }
  __syncthreads();
  if (pred) out[block_base + wave_count[wid] + rank] = v;
}

// Early exit: a wave stops scanning once any lane found the key; __all checks for a fully-masked chunk.
__global__ void find_first(const int* __restrict__ keys, int key, int* __restrict__ found_at, int n) {
  const int lane = __lane_id();
  const int wave_global = (blockIdx.x * blockDim.x + threadIdx.x) / warpSize;
  const int nwaves_total = (gridDim.x * blockDim.x) / warpSize;
  for (int base = wave_global * warpSize; base < n; base += nwaves_total * warpSize) {
    const int i = base + lane;
    const bool in_range = i < n;
    if (__all(!in_range)) break;
    const bool hit = in_range && keys[i] == key;
    if (__any(hit)) {
      const unsigned long long m = __ballot(hit);
      if (lane == __ffsll(static_cast<unsigned long long>(m)) - 1) atomicMin(found_at, i);
      break;
    }
  }
}

// Divergence statistics: fraction of fully-uniform waves per block.
__global__ void branch_uniformity(const int* __restrict__ cond, unsigned int* __restrict__ uniform_waves,
                                  unsigned int* __restrict__ active_lanes, int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  if (gid >= n) return;
  const bool c = cond[gid] != 0;
  const bool uniform = __all(c) || !__any(c);
  const unsigned long long active = __ballot(1);
  if (__lane_id() == __ffsll(static_cast<unsigned long long>(active)) - 1) {
    if (uniform) atomicAdd(uniform_waves, 1u);
    atomicAdd(active_lanes, static_cast<unsigned int>(__popcll(active)));
  }
}
