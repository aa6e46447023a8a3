// Stream compaction with `__ballot_sync` + `__popc` prefix counts, and a radix-sort digit histogram with warp-private counters.
#include <cuda_runtime.h>
#include <cstdint>

template <typename T, typename Pred>
__device__ __forceinline__ void compact_tile(const T* __restrict__ in, T* __restrict__ out, int n, unsigned* __restrict__ count,
                                             Pred pred) {
  __shared__ unsigned warp_base[32];
  __shared__ unsigned block_base;
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T v{};
  const bool keep = i < n && pred(v = in[i]);
  const unsigned ballot = __ballot_sync(0xffffffffu, keep);
  const unsigned rank = __popc(ballot & ((1u << lane) - 1u));
  if (lane == 0) warp_base[warp] = __popc(ballot);
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned run = 0;
    for (unsigned w = 0; w < (blockDim.x + 31) / 32; ++w) {
      const unsigned c = warp_base[w];
      warp_base[w] = run;
      run += c;
    }
    block_base = atomicAdd(count, run);
  }
  __syncthreads();
  if (keep) out[block_base + warp_base[warp] + rank] = v;
}

struct NonZero {
  __device__ bool operator()(float v) const { return v != 0.f; }
};
struct Odd {
  __device__ bool operator()(uint64_t v) const { return (v & 1u) != 0; }
};

__global__ void compact_nonzero(const float* __restrict__ in, float* __restrict__ out, int n, unsigned* count) {
  compact_tile(in, out, n, count, NonZero{});
}
__global__ void compact_odd(const uint64_t* __restrict__ in, uint64_t* __restrict__ out, int n, unsigned* count) {
  compact_tile(in, out, n, count, Odd{});
}

// 8-bit digit histogram for one radix pass; each warp keeps its own 256 counters in shared memory.
__global__ void __launch_bounds__(256) radix_histogram(const uint32_t* __restrict__ keys, int n, int shift,
                                                       unsigned* __restrict__ global_hist) {
  __shared__ unsigned hist[8][256];
  const int warp = threadIdx.x >> 5;
  for (int j = threadIdx.x; j < 8 * 256; j += blockDim.x) (&hist[0][0])[j] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const unsigned digit = (keys[i] >> shift) & 0xffu;
    // Lanes that share a digit add once (warp-aggregated via match).
    const unsigned peers = __match_any_sync(__activemask(), digit);
    if ((threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(&hist[warp][digit], __popc(peers));
  }
  __syncthreads();
  for (int d = threadIdx.x; d < 256; d += blockDim.x) {
    unsigned s = 0;
#pragma unroll
    for (int w = 0; w < 8; ++w) s += hist[w][d];
    if (s) atomicAdd(&global_hist[d], s);
  }
}
