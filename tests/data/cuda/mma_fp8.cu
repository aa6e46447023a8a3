// FP8 tensor cores (sm_89+): `mma.sync...m16n8k32...e4m3/e5m2` inline PTX, `cvt.rn.satfinite.e4m3x2.f32` packing and `__nv_fp8` types, guarded by __CUDA_ARCH__ >= 890.
#include <cuda_fp8.h>
#include <cstdint>

// Quantise f32 -> packed e4m3x4 with a per-tensor scale (amax-based, as Transformer Engine does).
__global__ void quantize_e4m3(const float4* __restrict__ in, uint32_t* __restrict__ out, int n4, const float* __restrict__ amax) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  const float scale = 448.f / fmaxf(*amax, 1e-12f);
  const float4 v = in[i];
#if __CUDA_ARCH__ >= 890
  uint16_t lo, hi;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(lo) : "f"(v.y * scale), "f"(v.x * scale));
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;\n" : "=h"(hi) : "f"(v.w * scale), "f"(v.z * scale));
  out[i] = uint32_t(lo) | (uint32_t(hi) << 16);
#else
  const __nv_fp8x4_e4m3 q(make_float4(v.x * scale, v.y * scale, v.z * scale, v.w * scale));
  out[i] = q.__x;
#endif
}

// Library conversions (work on every arch): e5m2 gradients back to float, scaled.
__global__ void dequantize_e5m2(const __nv_fp8_e5m2* __restrict__ in, float* __restrict__ out, int n, float inv_scale) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<float>(in[i]) * inv_scale;
}

enum class Fp8Kind { e4m3_e4m3, e4m3_e5m2, e5m2_e5m2 };

template <Fp8Kind kKind>
__device__ __forceinline__ void mma_fp8_16832(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if __CUDA_ARCH__ >= 890
  if constexpr (kKind == Fp8Kind::e4m3_e4m3) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else if constexpr (kKind == Fp8Kind::e4m3_e5m2) {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#else
  (void)d; (void)a; (void)b;
  __trap();
#endif
}

// FP8 GEMM, one warp per 16x8 output tile, A [M,K] row-major, B^T [N,K] row-major (i.e. col-major B),
// f32 accumulation, scaled bf16-free f32 output.
template <Fp8Kind kKind>
__global__ void gemm_fp8(const uint8_t* __restrict__ A, const uint8_t* __restrict__ Bt, float* __restrict__ C, int M, int N,
                         int K, float scale_ab) {
  const int lane = threadIdx.x % 32;
  const int tile = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int tm = (tile / (N / 8)) * 16, tn = (tile % (N / 8)) * 8;
  if (tm >= M) return;
  const int gr = lane / 4, gc = (lane % 4) * 4;
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  for (int k = 0; k < K; k += 32) {
    uint32_t a[4], b[2];
    a[0] = *reinterpret_cast<const uint32_t*>(&A[size_t(tm + gr) * K + k + gc]);
    a[1] = *reinterpret_cast<const uint32_t*>(&A[size_t(tm + gr + 8) * K + k + gc]);
    a[2] = *reinterpret_cast<const uint32_t*>(&A[size_t(tm + gr) * K + k + gc + 16]);
    a[3] = *reinterpret_cast<const uint32_t*>(&A[size_t(tm + gr + 8) * K + k + gc + 16]);
    b[0] = *reinterpret_cast<const uint32_t*>(&Bt[size_t(tn + gr) * K + k + gc]);
    b[1] = *reinterpret_cast<const uint32_t*>(&Bt[size_t(tn + gr) * K + k + gc + 16]);
    mma_fp8_16832<kKind>(d, a, b);
  }
  const int col = tn + (lane % 4) * 2;
  C[size_t(tm + gr) * N + col] = d[0] * scale_ab;
  C[size_t(tm + gr) * N + col + 1] = d[1] * scale_ab;
  C[size_t(tm + gr + 8) * N + col] = d[2] * scale_ab;
  C[size_t(tm + gr + 8) * N + col + 1] = d[3] * scale_ab;
}

template __global__ void gemm_fp8<Fp8Kind::e4m3_e4m3>(const uint8_t*, const uint8_t*, float*, int, int, int, float);
template __global__ void gemm_fp8<Fp8Kind::e4m3_e5m2>(const uint8_t*, const uint8_t*, float*, int, int, int, float);
template __global__ void gemm_fp8<Fp8Kind::e5m2_e5m2>(const uint8_t*, const uint8_t*, float*, int, int, int, float);
