// Cooperative groups tiles: static tiled_partition<N>(block) with tile shfl_down/shfl_xor/sync,
// dynamic tiled_partition(block, n), and coalesced_threads().
#include <hip/hip_runtime.h>
#include <hip/hip_cooperative_groups.h>

namespace cg = cooperative_groups;

template <unsigned int TileSize, typename T>
__device__ T tile_reduce(cg::thread_block_tile<TileSize> tile, T v) {
  for (unsigned int offset = tile.size() / 2; offset > 0; offset /= 2) v += tile.shfl_down(v, offset);
  return v;
}

template <unsigned int TileSize>
__global__ void tiled_dot(const float* __restrict__ x, const float* __restrict__ y, float* __restrict__ out, int n) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<TileSize> tile = cg::tiled_partition<TileSize>(block);

  float acc = 0.0f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) acc += x[i] * y[i];
  acc = tile_reduce<TileSize>(tile, acc);
  if (tile.thread_rank() == 0) atomicAdd(out, acc);
}

template __global__ void tiled_dot<4>(const float*, const float*, float*, int);
template __global__ void tiled_dot<16>(const float*, const float*, float*, int);
template __global__ void tiled_dot<32>(const float*, const float*, float*, int);

// Butterfly all-reduce and broadcast within 8-lane tiles: each tile normalises its 8 values.
__global__ void tile8_normalize(float* __restrict__ v, int n) {
  auto tile = cg::tiled_partition<8>(cg::this_thread_block());
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  const float x = gid < n ? v[gid] : 0.0f;
  float s = x * x;
  for (unsigned int m = tile.size() / 2; m > 0; m >>= 1) s += tile.shfl_xor(s, m);
  const float lead = tile.shfl(x, 0);
  tile.sync();
  if (gid < n) v[gid] = x * rsqrtf(s + 1e-12f) + 0.0f * lead;
}

// Run-time tile size (thread_group from tiled_partition(block, size)).
__global__ void dynamic_tile_rank(int* __restrict__ out, unsigned int tile_size) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_group tile = cg::tiled_partition(block, tile_size);
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  out[gid] = tile.thread_rank() * 1000 + tile.size();
  tile.sync();
}

// coalesced_threads(): the active lanes of a divergent branch aggregate one atomic.
__global__ void coalesced_append(const int* __restrict__ in, int* __restrict__ out, unsigned int* __restrict__ tail,
                                 int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  if (gid < n && (in[gid] & 1)) {
    cg::coalesced_group active = cg::coalesced_threads();
    unsigned int base = 0;
    if (active.thread_rank() == 0) base = atomicAdd(tail, active.size());
    base = active.shfl(base, 0);
    out[base + active.thread_rank()] = in[gid];
  }
}
