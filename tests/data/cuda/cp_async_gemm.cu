// Multi-stage double-buffered GEMM with inline `cp.async.cg.shared.global` / `cp.async.commit_group` / `cp.async.wait_group` PTX and ldmatrix+mma.sync.
#include <cuda_fp16.h>
#include <cstdint>

namespace cpa {

__device__ __forceinline__ uint32_t smem_addr(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool pred) {
  const int src_size = pred ? 16 : 0;  // zero-fill when out of bounds
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_size));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Block tile 128x128x32, 8 warps (2x4), warp tile 64x32; kStages of smem buffers, XOR-swizzled
// 16-byte chunks (no padding), A row-major, B row-major; dynamic shared memory.
template <int kStages>
__global__ void __launch_bounds__(256, 1) hgemm_multistage(const half* __restrict__ A, const half* __restrict__ B,
                                                           half* __restrict__ C, int M, int N, int K, float alpha) {
  constexpr int BM = 128, BN = 128, BK = 32;
  extern __shared__ __align__(128) unsigned char smem[];
  half* sA = reinterpret_cast<half*>(smem);                // [kStages][BM][BK]
  half* sB = sA + kStages * BM * BK;                       // [kStages][BK][BN]
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = (warp / 4) * 64, wn = (warp % 4) * 32;
  const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
  const int k_tiles = K / BK;

  auto swz_a = [](int r, int c) { return r * BK + (((c / 8) ^ (r % 4)) * 8) + c % 8; };
  auto swz_b = [](int r, int c) { return r * BN + (((c / 8) ^ (r % 8)) * 8) + c % 8; };
  auto load_stage = [&](int stage, int kt) {
    half* a = sA + stage * BM * BK;
    half* b = sB + stage * BK * BN;
#pragma unroll
    for (int i = 0; i < 2; ++i) {  // A: 128x32 halves = 512 chunks of 16 B
      const int chunk = tid + i * 256, r = chunk / 4, c = (chunk % 4) * 8;
      cp_async_16(a + swz_a(r, c), A + size_t(bm + r) * K + kt * BK + c, bm + r < M);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {  // B: 32x128 halves = 512 chunks
      const int chunk = tid + i * 256, r = chunk / 16, c = (chunk % 16) * 8;
      cp_async_16(b + swz_b(r, c), B + size_t(kt * BK + r) * N + bn + c, bn + c < N);
    }
  };

  float acc[4][4][4] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();
    const int next = kt + kStages - 1;
    if (next < k_tiles) load_stage(next % kStages, next);
    cp_async_commit();
    const half* a = sA + (kt % kStages) * BM * BK;
    const half* b = sB + (kt % kStages) * BK * BN;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      uint32_t fa[4][4], fb[2][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) ldsm_x4(fa[i], a + swz_a(wm + i * 16 + lane % 16, kk + (lane / 16) * 8));
#pragma unroll
      for (int j = 0; j < 2; ++j) ldsm_x4_t(fb[j], b + swz_b(kk + lane % 16, wn + j * 16 + (lane / 16) * 8));
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) mma(acc[i][j], fa[i], fb[j / 2][(j % 2) * 2], fb[j / 2][(j % 2) * 2 + 1]);
    }
  }
  cp_async_wait<0>();
  const int gr = lane / 4, gc = (lane % 4) * 2;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = bm + wm + i * 16 + gr, col = bn + wn + j * 8 + gc;
      if (row < M && col < N)
        *reinterpret_cast<__half2*>(&C[size_t(row) * N + col]) = __floats2half2_rn(alpha * acc[i][j][0], alpha * acc[i][j][1]);
      if (row + 8 < M && col < N)
        *reinterpret_cast<__half2*>(&C[size_t(row + 8) * N + col]) = __floats2half2_rn(alpha * acc[i][j][2], alpha * acc[i][j][3]);
    }
}

template __global__ void hgemm_multistage<2>(const half*, const half*, half*, int, int, int, float);
template __global__ void hgemm_multistage<3>(const half*, const half*, half*, int, int, int, float);
template __global__ void hgemm_multistage<4>(const half*, const half*, half*, int, int, int, float);

}  // namespace cpa
