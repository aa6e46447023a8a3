// RDNA3 WMMA, UNGUARDED (as in the GPUOpen "How to accelerate AI applications on RDNA 3 using WMMA"
// sample): __builtin_amdgcn_wmma_f32_16x16x16_f16_w32 in wave32. Only gfx11 accepts it.
#include <hip/hip_runtime.h>

typedef _Float16 half16 __attribute__((ext_vector_type(16)));
typedef float float8 __attribute__((ext_vector_type(8)));

// One wave32 computes a 16x16 tile of C = A * B (16x16x16, fp16 in, fp32 out).
// Lanes 0-15 and 16-31 both load the full row of A / column of B (the ISA requires the duplicate);
// the result: lane l holds C[2*i + l/16][l % 16] in element i.
__global__ void wmma_matmul(const _Float16* __restrict__ a, const _Float16* __restrict__ b, float* __restrict__ c) {
  const int lane = threadIdx.x % 16;
  half16 a_frag;
  half16 b_frag;
  float8 c_frag = {};
  for (int ele = 0; ele < 16; ++ele) {
    b_frag[ele] = b[16 * ele + lane];
    a_frag[ele] = a[16 * lane + ele];
  }
  c_frag = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(a_frag, b_frag, c_frag);
  for (int ele = 0; ele < 8; ++ele) {
    const int r = ele * 2 + (threadIdx.x / 16);
    c[16 * r + lane] = c_frag[ele];
  }
}

// Tiled over K and over a grid of 16x16 output tiles, with beta*C epilogue.
__global__ void __launch_bounds__(32) wmma_gemm_tiled(const _Float16* __restrict__ A, const _Float16* __restrict__ B,
                                                      float* __restrict__ C, int M, int N, int K, float alpha,
                                                      float beta) {
  const int lane = threadIdx.x % 16;
  const int half_sel = threadIdx.x / 16;
  const int tm = blockIdx.y * 16, tn = blockIdx.x * 16;
  if (tm >= M || tn >= N) return;
  float8 acc = {};
  for (int k0 = 0; k0 < K; k0 += 16) {
    half16 af, bf;
    for (int e = 0; e < 16; ++e) {
      af[e] = A[(tm + lane) * K + k0 + e];
      bf[e] = B[(k0 + e) * N + tn + lane];
    }
    acc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(af, bf, acc);
  }
  for (int e = 0; e < 8; ++e) {
    const int r = tm + 2 * e + half_sel;
    float* out = &C[r * N + tn + lane];
    *out = alpha * acc[e] + beta * *out;
  }
}
