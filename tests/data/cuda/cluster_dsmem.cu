// sm_90 thread block clusters and distributed shared memory: `__cluster_dims__`, `cg::this_cluster()`, `map_shared_rank`, `cluster.sync()`.
// clang-22: cooperative_groups only defines cluster_group for nvcc/NVRTC unless _CG_CLUSTER_INTRINSICS_AVAILABLE
// is set (clang provides the __cluster_* intrinsics itself). Note: clang-22 parses __cluster_dims__ but
// drops it for NVPTX (no .reqnctapercluster in the PTX), so the host must launch with cluster dims.
#if defined(__clang__) && !defined(__NVCC__)
#define _CG_CLUSTER_INTRINSICS_AVAILABLE 1
#endif
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

// Distributed-shared-memory histogram (the programming guide's example): each block of the cluster
// owns a slice of the bins in its shared memory; any block may increment any slice remotely.
__global__ void __cluster_dims__(2, 1, 1) cluster_histogram(int* __restrict__ bins, const int* __restrict__ input, int n,
                                                            int nbins, int bins_per_block) {
  extern __shared__ int smem[];
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  for (int i = threadIdx.x; i < bins_per_block; i += blockDim.x) smem[i] = 0;
  cluster.sync();  // all slices zeroed before anyone writes remotely
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    const int v = min(max(input[i], 0), nbins - 1);
    const unsigned dst_block = v / bins_per_block;
    const int dst_off = v % bins_per_block;
    int* dst = cluster.map_shared_rank(smem, dst_block);
    atomicAdd(dst + dst_off, 1);
  }
  cluster.sync();  // remote writes done before the slices are read/flushed
  int* lbins = bins + blockIdx.x / cluster.num_blocks() * nbins + rank * bins_per_block;
  for (int i = threadIdx.x; i < bins_per_block; i += blockDim.x) atomicAdd(&lbins[i], smem[i]);
}

// Neighbour exchange in a ring of 4 blocks: each block reads its right neighbour's halo from DSMEM.
__global__ void __cluster_dims__(4, 1, 1) __launch_bounds__(256) ring_halo(const float* __restrict__ in, float* __restrict__ out,
                                                                         int width) {
  __shared__ float tile[256 + 2];
  cg::cluster_group cluster = cg::this_cluster();
  const int gx = blockIdx.x * 256 + threadIdx.x;
  tile[threadIdx.x + 1] = gx < width ? in[gx] : 0.f;
  cluster.sync();
  const unsigned me = cluster.block_rank(), nb = cluster.num_blocks();
  const float* right = cluster.map_shared_rank(tile, (me + 1) % nb);
  const float* left = cluster.map_shared_rank(tile, (me + nb - 1) % nb);
  if (threadIdx.x == 0) tile[0] = left[256];
  if (threadIdx.x == 255) tile[257] = right[1];
  cluster.sync();  // keep neighbours' smem alive until all remote reads finish
  if (gx < width) out[gx] = 0.25f * tile[threadIdx.x] + 0.5f * tile[threadIdx.x + 1] + 0.25f * tile[threadIdx.x + 2];
}

// Cluster size chosen at launch time (cudaLaunchKernelEx), bounded by the 3-argument __launch_bounds__
// (maxThreadsPerBlock, minBlocksPerMultiprocessor, maxBlocksPerCluster -> .maxclusterrank).
__global__ void __launch_bounds__(128, 1, 8) cluster_reduce_runtime(const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float partial;
  cg::cluster_group cluster = cg::this_cluster();
  auto warp = cg::tiled_partition<32>(cg::this_thread_block());
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int off = 16; off > 0; off >>= 1) v += warp.shfl_down(v, off);
  if (threadIdx.x == 0) partial = 0.f;
  __syncthreads();
  if (warp.thread_rank() == 0) atomicAdd(&partial, v);
  cluster.sync();
  if (cluster.block_rank() == 0 && threadIdx.x < cluster.num_blocks()) {
    const float other = *cluster.map_shared_rank(&partial, threadIdx.x);
    atomicAdd(&out[blockIdx.x / cluster.num_blocks()], other);
  }
  cluster.sync();
  const dim3 cdim = cluster.dim_blocks();
  if (threadIdx.x == 0 && cluster.block_rank() == 0 && cdim.x * cdim.y * cdim.z != cluster.num_blocks()) __trap();
}
