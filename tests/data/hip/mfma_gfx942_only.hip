// Arch-specific MFMA behind a single-arch guard: gfx942's FP8 (OCP e4m3/e5m2) matrix instructions and
// packed fp8 conversions under `#if defined(__gfx942__)`; every other arch compiles the dequantising fallback.
#include <hip/hip_runtime.h>

typedef float floatx4 __attribute__((ext_vector_type(4)));

#if defined(__gfx942__)
// Quantise 4 floats to 4 fp8 (e4m3) bytes with the hardware converter (two v_cvt_pk_fp8_f32).
__device__ inline int pack_fp8x4(float a, float b, float c, float d) {
  int r = __builtin_amdgcn_cvt_pk_fp8_f32(a, b, 0, false);
  return __builtin_amdgcn_cvt_pk_fp8_f32(c, d, r, true);
}
#endif

__global__ void quantize_fp8(const float* __restrict__ in, int* __restrict__ out4, float scale, int n4) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  const float a = in[4 * i] * scale, b = in[4 * i + 1] * scale, c = in[4 * i + 2] * scale, d = in[4 * i + 3] * scale;
#if defined(__gfx942__)
  out4[i] = pack_fp8x4(a, b, c, d);
#else
  // Software path: clamp and keep an 8-bit fixed-point code (not fp8, but the same storage).
  auto q = [](float x) { return static_cast<int>(fminf(fmaxf(rintf(x), -127.0f), 127.0f)) & 0xff; };
  out4[i] = q(a) | (q(b) << 8) | (q(c) << 16) | (q(d) << 24);
#endif
}

// 16x16 tile, K stepped by 32, fp8 x fp8 -> f32 (v_mfma_f32_16x16x32_fp8_fp8).
__global__ void gemm16_fp8(const long* __restrict__ A8, const long* __restrict__ B8, float* __restrict__ C, int K,
                           float scale) {
#if defined(__gfx942__)
  const int lane = threadIdx.x % 64;
  floatx4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < K; k0 += 32) {
    const long a = A8[((lane % 16) * K + k0 + 8 * (lane / 16)) / 8];
    const long b = B8[((lane % 16) * K + k0 + 8 * (lane / 16)) / 8];
    acc = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(a, b, acc, 0, 0, 0);
  }
  for (int i = 0; i < 4; ++i) C[(4 * (lane / 16) + i) * 16 + lane % 16] = acc[i] * scale;
#else
  for (int idx = threadIdx.x; idx < 256; idx += blockDim.x) {
    float s = 0.0f;
    const signed char* a = reinterpret_cast<const signed char*>(A8) + (idx / 16) * K;
    const signed char* b = reinterpret_cast<const signed char*>(B8) + (idx % 16) * K;
    for (int k = 0; k < K; ++k) s += static_cast<float>(a[k]) * static_cast<float>(b[k]);
    C[idx] = s * scale;
  }
#endif
}
