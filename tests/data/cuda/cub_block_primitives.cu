// CUB block/warp collectives in user kernels: `cub::BlockReduce`, `BlockScan`, `BlockLoad`/`BlockStore`, `BlockRadixSort`, `WarpReduce` with TempStorage unions in static shared memory.
#include <cub/block/block_load.cuh>
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
#include <cub/warp/warp_reduce.cuh>

// Per-block sum and max with one TempStorage union reused across collectives.
template <int kBlock, int kItems>
__global__ void __launch_bounds__(kBlock) block_stats(const float* __restrict__ in, int n, float* __restrict__ block_sum,
                                                     float* __restrict__ block_max) {
  using Load = cub::BlockLoad<float, kBlock, kItems, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
  using Reduce = cub::BlockReduce<float, kBlock, cub::BLOCK_REDUCE_WARP_REDUCTIONS>;
  __shared__ union {
    typename Load::TempStorage load;
    typename Reduce::TempStorage reduce;
  } temp;
  float items[kItems];
  const int base = blockIdx.x * kBlock * kItems;
  Load(temp.load).Load(in + base, items, n - base, 0.f);
  __syncthreads();
  const float s = Reduce(temp.reduce).Sum(items);
  __syncthreads();
  const float m = Reduce(temp.reduce).Reduce(items, [](float a, float b) { return a > b ? a : b; });
  if (threadIdx.x == 0) {
    block_sum[blockIdx.x] = s;
    block_max[blockIdx.x] = m;
  }
}

template __global__ void block_stats<128, 4>(const float*, int, float*, float*);
template __global__ void block_stats<256, 8>(const float*, int, float*, float*);

// Exclusive prefix sum of counts with BlockScan, then a scatter (a compaction step).
__global__ void __launch_bounds__(256) scan_scatter(const int* __restrict__ flags, const int* __restrict__ vals, int n,
                                                    int* __restrict__ out, int* __restrict__ block_totals) {
  using Scan = cub::BlockScan<int, 256>;
  __shared__ typename Scan::TempStorage temp;
  const int i = blockIdx.x * 256 + threadIdx.x;
  const int f = i < n ? flags[i] != 0 : 0;
  int pos, total;
  Scan(temp).ExclusiveSum(f, pos, total);
  if (f) out[blockIdx.x * 256 + pos] = vals[i];
  if (threadIdx.x == 0) block_totals[blockIdx.x] = total;
}

// Block-local key-value radix sort (tile sort), blocked -> striped store.
__global__ void __launch_bounds__(128) tile_sort_pairs(const unsigned* __restrict__ keys, const int* __restrict__ vals,
                                                       unsigned* __restrict__ keys_out, int* __restrict__ vals_out) {
  using Sort = cub::BlockRadixSort<unsigned, 128, 4, int>;
  using StoreK = cub::BlockStore<unsigned, 128, 4, cub::BLOCK_STORE_WARP_TRANSPOSE>;
  using StoreV = cub::BlockStore<int, 128, 4, cub::BLOCK_STORE_WARP_TRANSPOSE>;
  __shared__ union {
    typename Sort::TempStorage sort;
    typename StoreK::TempStorage sk;
    typename StoreV::TempStorage sv;
  } temp;
  unsigned k[4];
  int v[4];
  const int base = blockIdx.x * 512;
  cub::LoadDirectBlocked(threadIdx.x, keys + base, k);
  cub::LoadDirectBlocked(threadIdx.x, vals + base, v);
  Sort(temp.sort).Sort(k, v);
  __syncthreads();
  StoreK(temp.sk).Store(keys_out + base, k);
  __syncthreads();
  StoreV(temp.sv).Store(vals_out + base, v);
}

// Logical-warp reductions of 16 threads (segmented row sums).
__global__ void row_sums_warp16(const double* __restrict__ m, int cols, double* __restrict__ out) {
  using WarpReduce = cub::WarpReduce<double, 16>;
  __shared__ typename WarpReduce::TempStorage temp[8];
  const int row = blockIdx.x * 8 + threadIdx.x / 16;
  const int lane = threadIdx.x % 16;
  double acc = 0.0;
  for (int c = lane; c < cols; c += 16) acc += m[size_t(row) * cols + c];
  const double total = WarpReduce(temp[threadIdx.x / 16]).Sum(acc);
  if (lane == 0) out[row] = total;
}
