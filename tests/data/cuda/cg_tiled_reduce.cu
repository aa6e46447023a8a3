// Cooperative groups: `tiled_partition` (static and dynamic), `cg::reduce`/`cg::inclusive_scan`, tile shuffles and a block-wide dot product.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>

namespace cg = cooperative_groups;

template <unsigned kTile, typename T>
__device__ T tile_sum(cg::thread_block_tile<kTile> tile, T v) {
  return cg::reduce(tile, v, cg::plus<T>());
}

// Sparse matrix-vector product (CSR), one tile of kTile threads per row (the "vector" kernel).
template <int kTile>
__global__ void spmv_csr_tiled(int rows, const int* __restrict__ row_ptr, const int* __restrict__ cols,
                               const float* __restrict__ vals, const float* __restrict__ x, float* __restrict__ y) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<kTile> tile = cg::tiled_partition<kTile>(block);
  const int row = blockIdx.x * (block.size() / kTile) + block.thread_rank() / kTile;
  if (row >= rows) return;
  float acc = 0.f;
  for (int j = row_ptr[row] + tile.thread_rank(); j < row_ptr[row + 1]; j += kTile) acc += vals[j] * x[cols[j]];
  acc = tile_sum(tile, acc);
  if (tile.thread_rank() == 0) y[row] = acc;
}
template __global__ void spmv_csr_tiled<4>(int, const int*, const int*, const float*, const float*, float*);
template __global__ void spmv_csr_tiled<8>(int, const int*, const int*, const float*, const float*, float*);
template __global__ void spmv_csr_tiled<16>(int, const int*, const int*, const float*, const float*, float*);
template __global__ void spmv_csr_tiled<32>(int, const int*, const int*, const float*, const float*, float*);

// Block dot product: warp tiles reduce with cg::reduce, warp leaders combine through shared memory
// with a second reduce over a dynamic (thread_group) partition.
__global__ void dot_block(const double* __restrict__ a, const double* __restrict__ b, int n, double* __restrict__ out) {
  __shared__ double warp_sums[32];
  cg::thread_block block = cg::this_thread_block();
  auto warp = cg::tiled_partition<32>(block);
  double acc = 0.0;
  for (int i = block.group_index().x * block.size() + block.thread_rank(); i < n; i += gridDim.x * block.size())
    acc += a[i] * b[i];
  acc = cg::reduce(warp, acc, cg::plus<double>());
  if (warp.thread_rank() == 0) warp_sums[warp.meta_group_rank()] = acc;
  block.sync();
  if (warp.meta_group_rank() == 0) {
    double v = warp.thread_rank() < warp.meta_group_size() ? warp_sums[warp.thread_rank()] : 0.0;
    v = cg::reduce(warp, v, cg::plus<double>());
    if (warp.thread_rank() == 0) atomicAdd(out, v);
  }
}

// Tile-level scan, max-reduce and shuffles: run-length encode within 16-thread tiles.
__global__ void tile_rle(const int* __restrict__ in, int n, int* __restrict__ run_starts, int* __restrict__ tile_max) {
  auto tile = cg::tiled_partition<16>(cg::this_thread_block());
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int v = i < n ? in[i] : -1;
  const int prev = tile.shfl_up(v, 1);
  const int starts = (tile.thread_rank() == 0 || prev != v) ? 1 : 0;
  const int pos = cg::inclusive_scan(tile, starts) - 1;
  if (starts && i < n) run_starts[(i / 16) * 16 + pos] = i;
  const int m = cg::reduce(tile, v, cg::greater<int>());
  if (tile.thread_rank() == 0 && i < n) tile_max[i / 16] = m;
  // any()/all()/ballot() on the tile.
  if (tile.all(v >= 0) && tile.thread_rank() == 0 && i < n) tile_max[i / 16] |= 0x40000000;
  if (tile.any(v < 0) && tile.thread_rank() == 0 && i < n) tile_max[i / 16] |= static_cast<int>(tile.ballot(v < 0) << 16);
}

// A dynamic (runtime-size) partition, as code that picks the tile size from a parameter does.
__global__ void dynamic_partition_sum(const float* __restrict__ in, float* __restrict__ out, unsigned tile_size) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_group tile = cg::tiled_partition(block, tile_size);
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (unsigned off = 1; off < tile.size(); off <<= 1) {
    v += __shfl_down_sync(0xffffffffu, v, off, tile.size());
  }
  tile.sync();
  if (tile.thread_rank() == 0) out[(blockIdx.x * blockDim.x + threadIdx.x) / tile.size()] = v;
}
