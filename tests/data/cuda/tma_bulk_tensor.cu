// sm_90a TMA: `cp.async.bulk.tensor.2d` loads/stores through a `__grid_constant__ CUtensorMap`, mbarrier expect_tx/try_wait, 1D `cp.async.bulk`, multicast.
#include <cuda.h>  // CUtensorMap
#include <cstdint>

namespace tma {

__device__ __forceinline__ uint32_t smem(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t phase) {
  asm volatile(
      "{\n\t.reg .pred done;\n"
      "WAIT_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
      "@!done bra WAIT_%=;\n\t}\n" ::"r"(smem(bar)),
      "r"(phase)
      : "memory");
}
__device__ __forceinline__ void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          smem(dst)),
      "l"(map), "r"(smem(bar)), "r"(x), "r"(y)
      : "memory");
}
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const CUtensorMap* map, uint64_t* bar, int x, int y,
                                                      uint16_t cta_mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;\n" ::
          "r"(smem(dst)),
      "l"(map), "r"(smem(bar)), "r"(x), "r"(y), "h"(cta_mask)
      : "memory");
}
__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, const void* src, int x, int y) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(map), "r"(smem(src)),
               "r"(x), "r"(y)
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(map) : "memory");
}

}  // namespace tma

// Tile-wise scale: TMA loads a 64x64 f32 tile (kStages-deep ring), threads scale it in smem, TMA
// stores it back. One elected thread issues all TMA operations.
template <int kStages>
__global__ void __launch_bounds__(128) tma_scale_tiles(const __grid_constant__ CUtensorMap in_map,
                                                       const __grid_constant__ CUtensorMap out_map, int tiles_x, int tiles_y,
                                                       float scale) {
  constexpr int kTile = 64;
  extern __shared__ __align__(1024) unsigned char dsmem[];
  float* tiles = reinterpret_cast<float*>(dsmem);  // [kStages][64*64]
  __shared__ __align__(8) uint64_t full[kStages];
  const int total = tiles_x * tiles_y;
  const bool leader = threadIdx.x == 0;
  if (leader) {
    tma::prefetch_map(&in_map);
    tma::prefetch_map(&out_map);
    for (int s = 0; s < kStages; ++s) tma::mbar_init(&full[s], 1);
    tma::fence_barrier_init();
  }
  __syncthreads();
  auto issue = [&](int local, int tile) {
    const int s = local % kStages;
    tma::mbar_expect_tx(&full[s], kTile * kTile * sizeof(float));
    tma::tma_load_2d(tiles + s * kTile * kTile, &in_map, &full[s], (tile % tiles_x) * kTile, (tile / tiles_x) * kTile);
  };
  int local = 0;
  if (leader)
    for (int t = blockIdx.x, p = 0; p < kStages && t < total; t += gridDim.x, ++p) issue(p, t);
  for (int t = blockIdx.x; t < total; t += gridDim.x, ++local) {
    const int s = local % kStages;
    tma::mbar_wait(&full[s], (local / kStages) & 1);
    float* tile = tiles + s * kTile * kTile;
    for (int i = threadIdx.x; i < kTile * kTile; i += blockDim.x) tile[i] *= scale;
    tma::fence_proxy_async();  // make generic-proxy writes visible to the TMA (async proxy)
    __syncthreads();
    if (leader) {
      tma::tma_store_2d(&out_map, tile, (t % tiles_x) * kTile, (t / tiles_x) * kTile);
      tma::bulk_commit();
      tma::bulk_wait_read0();  // the slot may be refilled only after the store has read it
      const int next = t + kStages * gridDim.x;
      if (next < total) issue(local + kStages, next);
    }
    __syncthreads();
  }
}

template __global__ void tma_scale_tiles<2>(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap, int, int, float);
template __global__ void tma_scale_tiles<4>(const __grid_constant__ CUtensorMap, const __grid_constant__ CUtensorMap, int, int, float);

// Multicast TMA inside a cluster of 2: each block loads half of a shared operand tile and multicasts
// it to both blocks' shared memory (what CUTLASS does for the A/B operands of a 2x1 cluster).
__global__ void __launch_bounds__(128) tma_multicast_pair(const __grid_constant__ CUtensorMap map, float* __restrict__ out) {
  __shared__ __align__(128) float tile[64 * 32];
  __shared__ __align__(8) uint64_t bar;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  if (threadIdx.x == 0) {
    tma::mbar_init(&bar, 1);
    tma::fence_barrier_init();
  }
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  if (threadIdx.x == 0) {
    tma::mbar_expect_tx(&bar, sizeof(tile));
    tma::tma_load_2d_multicast(tile + rank * 32 * 32, &map, &bar, 0, blockIdx.y * 64 + rank * 32, 0x3);
  }
  tma::mbar_wait(&bar, 0);
  float s = 0.f;
  for (int i = threadIdx.x; i < 64 * 32; i += blockDim.x) s += tile[i];
  atomicAdd(&out[blockIdx.x], s);
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// Plain (non-tensor) bulk copy global -> shared with mbarrier completion, then bulk shared -> global.
__global__ void bulk_copy_1d(const float4* __restrict__ src, float4* __restrict__ dst, int chunk_f4) {
  extern __shared__ __align__(128) float4 buf[];
  __shared__ __align__(8) uint64_t bar;
  const uint32_t bytes = chunk_f4 * sizeof(float4);
  if (threadIdx.x == 0) {
    tma::mbar_init(&bar, 1);
    tma::fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tma::mbar_expect_tx(&bar, bytes);
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(tma::smem(buf)),
                 "l"(src + size_t(blockIdx.x) * chunk_f4), "r"(bytes), "r"(tma::smem(&bar))
                 : "memory");
  }
  tma::mbar_wait(&bar, 0);
  for (int i = threadIdx.x; i < chunk_f4; i += blockDim.x) {
    float4 v = buf[i];
    buf[i] = make_float4(v.w, v.z, v.y, v.x);
  }
  tma::fence_proxy_async();
  __syncthreads();
  if (threadIdx.x == 0) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"(dst + size_t(blockIdx.x) * chunk_f4),
                 "r"(tma::smem(buf)), "r"(bytes)
                 : "memory");
    tma::bulk_commit();
    asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
  }
}
