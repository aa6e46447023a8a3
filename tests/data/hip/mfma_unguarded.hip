// MFMA matrix cores, UNGUARDED (as in CDNA-only code such as the rocWMMA/AMD lab notes samples):
// __builtin_amdgcn_mfma_f32_32x32x8f16, _16x16x16f16 and _32x32x2f32. Only gfx908/gfx90a/gfx942 accept it.
#include <hip/hip_runtime.h>

typedef _Float16 half4 __attribute__((ext_vector_type(4)));
typedef float floatx4 __attribute__((ext_vector_type(4)));
typedef float floatx16 __attribute__((ext_vector_type(16)));

// One wavefront computes a 32x32 tile of D = A * B (fp16 in, fp32 accumulate), K stepped by 8.
// Lane layout (AMD matrix instruction calculator, v_mfma_f32_32x32x8f16): lane l holds
// A[l % 32][4*(l/32) .. +3] and B[4*(l/32) .. +3][l % 32].
__global__ void __launch_bounds__(64) sgemm_32x32x8_f16(const _Float16* __restrict__ A, const _Float16* __restrict__ B,
                                                        float* __restrict__ D, int K, int lda, int ldb, int ldd) {
  const int lane = threadIdx.x;
  const int tile_m = blockIdx.y * 32, tile_n = blockIdx.x * 32;
  floatx16 acc = {0};
  for (int k0 = 0; k0 < K; k0 += 8) {
    half4 a, b;
    for (int i = 0; i < 4; ++i) {
      a[i] = A[(tile_m + lane % 32) * lda + k0 + 4 * (lane / 32) + i];
      b[i] = B[(k0 + 4 * (lane / 32) + i) * ldb + tile_n + lane % 32];
    }
    acc = __builtin_amdgcn_mfma_f32_32x32x8f16(a, b, acc, 0, 0, 0);
  }
  // D layout: 4 groups of 4 rows, 8 rows apart per group.
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 4; ++i) D[(tile_m + 8 * j + (lane / 32) * 4 + i) * ldd + tile_n + lane % 32] = acc[4 * j + i];
}

__global__ void __launch_bounds__(64) sgemm_16x16x16_f16(const _Float16* __restrict__ A, const _Float16* __restrict__ B,
                                                         float* __restrict__ D, int K) {
  const int lane = threadIdx.x;
  floatx4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < K; k0 += 16) {
    half4 a, b;
    for (int i = 0; i < 4; ++i) {
      a[i] = A[(lane % 16) * K + k0 + 4 * (lane / 16) + i];
      b[i] = B[(k0 + 4 * (lane / 16) + i) * 16 + lane % 16];
    }
    acc = __builtin_amdgcn_mfma_f32_16x16x16f16(a, b, acc, 0, 0, 0);
  }
  for (int i = 0; i < 4; ++i) D[(4 * (lane / 16) + i) * 16 + lane % 16] = acc[i];
}

// fp32 MFMA: 32x32 outer-product accumulation, one K per instruction, two blocks (K split in 2).
__global__ void __launch_bounds__(64) sgemm_32x32x2_f32(const float* __restrict__ A, const float* __restrict__ B,
                                                        float* __restrict__ D, int K) {
  const int lane = threadIdx.x;
  floatx16 acc = {0};
  for (int k0 = 0; k0 < K; k0 += 2) {
    const float a = A[(lane % 32) * K + k0 + lane / 32];
    const float b = B[(k0 + lane / 32) * 32 + lane % 32];
    acc = __builtin_amdgcn_mfma_f32_32x32x2f32(a, b, acc, 0, 0, 0);
  }
  for (int i = 0; i < 16; ++i) D[i * 64 + lane] = acc[i];
}
