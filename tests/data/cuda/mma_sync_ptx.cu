// Raw tensor-core inline PTX: `ldmatrix` + `mma.sync.aligned.m16n8k16` (f16 and bf16) and m16n8k8 tf32, in a warp-tiled GEMM as CUTLASS emits it.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <type_traits>

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t (&r)[2], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_u32(p)));
}

template <bool kBf16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
}

// 64x64 block tile, 4 warps each computing 32x32 = 2x4 m16n8 tiles, k-step 16; A row-major [M,K],
// B row-major [K,N] (ldmatrix .trans gives the col-major B operand).
template <typename T>
__global__ void __launch_bounds__(128) gemm_mma16816(const T* __restrict__ A, const T* __restrict__ B, float* __restrict__ C,
                                                     int M, int N, int K) {
  constexpr bool kBf16 = sizeof(T) == 2 && !std::is_same<T, __half>::value;
  __shared__ __align__(128) T sA[64][16 + 8];
  __shared__ __align__(128) T sB[16][64 + 8];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;
  const int bm = blockIdx.y * 64, bn = blockIdx.x * 64;
  float acc[2][4][4] = {};
  for (int k0 = 0; k0 < K; k0 += 16) {
    for (int t = threadIdx.x; t < 64 * 2; t += 128) {
      const int r = t / 2, c = (t % 2) * 8;
      *reinterpret_cast<int4*>(&sA[r][c]) = *reinterpret_cast<const int4*>(&A[size_t(bm + r) * K + k0 + c]);
    }
    for (int t = threadIdx.x; t < 16 * 8; t += 128) {
      const int r = t / 8, c = (t % 8) * 8;
      *reinterpret_cast<int4*>(&sB[r][c]) = *reinterpret_cast<const int4*>(&B[size_t(k0 + r) * N + bn + c]);
    }
    __syncthreads();
    uint32_t fa[2][4], fb[4][2];
#pragma unroll
    for (int i = 0; i < 2; ++i) ldmatrix_x4(fa[i], &sA[wm + i * 16 + (lane % 16)][(lane / 16) * 8]);
#pragma unroll
    for (int j = 0; j < 4; ++j) ldmatrix_x2_trans(fb[j], &sB[lane % 16][wn + j * 8]);
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) mma_16816<kBf16>(acc[i][j], fa[i], fb[j]);
    __syncthreads();
  }
  const int gr = lane / 4, gc = (lane % 4) * 2;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = bm + wm + i * 16 + gr, col = bn + wn + j * 8 + gc;
      if (row < M) *reinterpret_cast<float2*>(&C[size_t(row) * N + col]) = make_float2(acc[i][j][0], acc[i][j][1]);
      if (row + 8 < M) *reinterpret_cast<float2*>(&C[size_t(row + 8) * N + col]) = make_float2(acc[i][j][2], acc[i][j][3]);
    }
}

template __global__ void gemm_mma16816<__half>(const __half*, const __half*, float*, int, int, int);
template __global__ void gemm_mma16816<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, float*, int, int, int);

// tf32 m16n8k8 with cvt.rna.tf32.f32 conversion in registers (no shared staging).
__global__ void gemm_tf32_m16n8k8(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C, int N, int K) {
  const int lane = threadIdx.x % 32;
  const int tm = blockIdx.y * 16, tn = (blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32) * 8;
  const int gr = lane / 4, gc = lane % 4;
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  for (int k = 0; k < K; k += 8) {
    uint32_t a[4], b[2];
    const float av[4] = {A[size_t(tm + gr) * K + k + gc], A[size_t(tm + gr + 8) * K + k + gc],
                         A[size_t(tm + gr) * K + k + gc + 4], A[size_t(tm + gr + 8) * K + k + gc + 4]};
    const float bv[2] = {B[size_t(k + gc) * N + tn + gr], B[size_t(k + gc + 4) * N + tn + gr]};
#pragma unroll
    for (int q = 0; q < 4; ++q) asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(a[q]) : "f"(av[q]));
#pragma unroll
    for (int q = 0; q < 2; ++q) asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(b[q]) : "f"(bv[q]));
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  C[size_t(tm + gr) * N + tn + gc * 2] = d[0];
  C[size_t(tm + gr) * N + tn + gc * 2 + 1] = d[1];
  C[size_t(tm + gr + 8) * N + tn + gc * 2] = d[2];
  C[size_t(tm + gr + 8) * N + tn + gc * 2 + 1] = d[3];
}
