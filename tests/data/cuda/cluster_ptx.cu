// sm_90 clusters in raw PTX: `mapa.shared::cluster`, `ld/st/red.shared::cluster`, `barrier.cluster.arrive.release/wait.acquire`, cluster special registers.
#include <cstdint>

__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t map_to_rank(const void* smem_ptr, uint32_t rank) {
  uint32_t local = static_cast<uint32_t>(__cvta_generic_to_shared(smem_ptr)), remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
__device__ __forceinline__ void cluster_arrive_release() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait_acquire() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
__device__ __forceinline__ float ld_dsmem(uint32_t addr) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ void st_dsmem(uint32_t addr, float v) {
  asm volatile("st.shared::cluster.f32 [%0], %1;\n" ::"r"(addr), "f"(v) : "memory");
}
__device__ __forceinline__ void red_add_dsmem(uint32_t addr, uint32_t v) {
  asm volatile("red.relaxed.cluster.shared::cluster.add.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}

// Split-K reduction across the blocks of a cluster: every block computes a partial dot product over
// its K slice, then rank 0 gathers the partials from the other blocks' shared memory.
__global__ void __launch_bounds__(256) splitk_dot_cluster(const float* __restrict__ a, const float* __restrict__ b, int k_per_block,
                                                          float* __restrict__ out) {
  __shared__ float warp_part[8];
  __shared__ float block_total;
  __shared__ uint32_t arrivals;
  const uint32_t rank = cluster_ctarank(), nranks = cluster_nctarank();
  const size_t base = size_t(blockIdx.x) * k_per_block;
  float acc = 0.f;
  for (int i = threadIdx.x; i < k_per_block; i += blockDim.x) acc = fmaf(a[base + i], b[base + i], acc);
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
  if (threadIdx.x % 32 == 0) warp_part[threadIdx.x / 32] = acc;
  if (threadIdx.x == 0) arrivals = 0;
  __syncthreads();
  if (threadIdx.x == 0) {
    float s = 0.f;
    for (int w = 0; w < 8; ++w) s += warp_part[w];
    block_total = s;
  }
  cluster_arrive_release();
  cluster_wait_acquire();
  if (threadIdx.x < nranks && threadIdx.x != 0) red_add_dsmem(map_to_rank(&arrivals, threadIdx.x), 1u);
  if (rank == 0 && threadIdx.x < nranks) {
    const float v = ld_dsmem(map_to_rank(&block_total, threadIdx.x));
    atomicAdd(out + blockIdx.x / nranks, v);
  }
  if (rank == 0 && threadIdx.x == 0) st_dsmem(map_to_rank(&block_total, 0), 0.f);
  cluster_arrive_release();
  cluster_wait_acquire();
}

// Cluster-level special registers and isspacep.shared::cluster.
__global__ void cluster_ids(uint4* __restrict__ out, const float* probe) {
  uint32_t cid_x, nclus_x, cctaid_x, is_cluster_smem;
  __shared__ float here;
  asm volatile("mov.u32 %0, %%clusterid.x;\n" : "=r"(cid_x));
  asm volatile("mov.u32 %0, %%nclusterid.x;\n" : "=r"(nclus_x));
  asm volatile("mov.u32 %0, %%cluster_ctaid.x;\n" : "=r"(cctaid_x));
  asm volatile("{\n\t.reg .pred p;\n\tisspacep.shared::cluster p, %1;\n\tselp.u32 %0, 1, 0, p;\n\t}\n"
               : "=r"(is_cluster_smem) : "l"(threadIdx.x & 1 ? static_cast<const void*>(&here) : static_cast<const void*>(probe)));
  if (threadIdx.x < 2) out[blockIdx.x * 2 + threadIdx.x] = make_uint4(cid_x, nclus_x, cctaid_x, is_cluster_smem);
}
