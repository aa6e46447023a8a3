// A huge unrolled kernel (a 4096-step FMA recurrence over 40 live registers, fully expanded: 20480 FMAs in one block) that makes opt/llc/ptxas slow: the daemon's time-limit path.
#include <cuda_runtime.h>

// Sizing (2-core machine, under load): the reference pipeline (opt -O2, llc, ptxas) takes about 3.5 s
// for sm_80 (ptxas most of it), clang about 2 s and nvcc -ptx about 12 s; the corpus lists it for
// sm_80 only.
//
// Why the body is expanded by the preprocessor and not by `#pragma unroll` over a 4096-trip loop:
// LLVM's unroller refuses full unrolling above its pragma threshold (16K instructions) and unrolls
// partially (see pragma_unroll_fma_chain below); a template pack expansion of 4096 steps makes clang
// itself slow (AlwaysInliner over 16K calls, LoopRotate over thousands of tiny loops); an array
// indexed by constant expressions makes cicc take minutes, and so (4x) do 16K __constant__ loads.
// Code generators emit named registers and immediates like this instead. KC_ROUND(B) is one
// generated round of 32 steps x 5 FMAs: step S updates v[(5S + Q) % 40] from v[(7S + 13Q + 5) % 40]
// and the immediate KC_K(B + S + Q).
#define KC_K(i) (0.001f * float((i) & 63))
#define KC_ROUND(B) \
  v0 = fmaf(v0, v5 * scale, KC_K((B) + 0)); v1 = fmaf(v1, v18 * scale, KC_K((B) + 1)); v2 = fmaf(v2, v31 * scale, KC_K((B) + 2)); v3 = fmaf(v3, v4 * scale, KC_K((B) + 3)); v4 = fmaf(v4, v17 * scale, KC_K((B) + 4)); \
  v5 = fmaf(v5, v12 * scale, KC_K((B) + 1)); v6 = fmaf(v6, v25 * scale, KC_K((B) + 2)); v7 = fmaf(v7, v38 * scale, KC_K((B) + 3)); v8 = fmaf(v8, v11 * scale, KC_K((B) + 4)); v9 = fmaf(v9, v24 * scale, KC_K((B) + 5)); \
  v10 = fmaf(v10, v19 * scale, KC_K((B) + 2)); v11 = fmaf(v11, v32 * scale, KC_K((B) + 3)); v12 = fmaf(v12, v5 * scale, KC_K((B) + 4)); v13 = fmaf(v13, v18 * scale, KC_K((B) + 5)); v14 = fmaf(v14, v31 * scale, KC_K((B) + 6)); \
  v15 = fmaf(v15, v26 * scale, KC_K((B) + 3)); v16 = fmaf(v16, v39 * scale, KC_K((B) + 4)); v17 = fmaf(v17, v12 * scale, KC_K((B) + 5)); v18 = fmaf(v18, v25 * scale, KC_K((B) + 6)); v19 = fmaf(v19, v38 * scale, KC_K((B) + 7)); \
  v20 = fmaf(v20, v33 * scale, KC_K((B) + 4)); v21 = fmaf(v21, v6 * scale, KC_K((B) + 5)); v22 = fmaf(v22, v19 * scale, KC_K((B) + 6)); v23 = fmaf(v23, v32 * scale, KC_K((B) + 7)); v24 = fmaf(v24, v5 * scale, KC_K((B) + 8)); \
  v25 = fmaf(v25, v0 * scale, KC_K((B) + 5)); v26 = fmaf(v26, v13 * scale, KC_K((B) + 6)); v27 = fmaf(v27, v26 * scale, KC_K((B) + 7)); v28 = fmaf(v28, v39 * scale, KC_K((B) + 8)); v29 = fmaf(v29, v12 * scale, KC_K((B) + 9)); \
  v30 = fmaf(v30, v7 * scale, KC_K((B) + 6)); v31 = fmaf(v31, v20 * scale, KC_K((B) + 7)); v32 = fmaf(v32, v33 * scale, KC_K((B) + 8)); v33 = fmaf(v33, v6 * scale, KC_K((B) + 9)); v34 = fmaf(v34, v19 * scale, KC_K((B) + 10)); \
  v35 = fmaf(v35, v14 * scale, KC_K((B) + 7)); v36 = fmaf(v36, v27 * scale, KC_K((B) + 8)); v37 = fmaf(v37, v0 * scale, KC_K((B) + 9)); v38 = fmaf(v38, v13 * scale, KC_K((B) + 10)); v39 = fmaf(v39, v26 * scale, KC_K((B) + 11)); \
  v0 = fmaf(v0, v21 * scale, KC_K((B) + 8)); v1 = fmaf(v1, v34 * scale, KC_K((B) + 9)); v2 = fmaf(v2, v7 * scale, KC_K((B) + 10)); v3 = fmaf(v3, v20 * scale, KC_K((B) + 11)); v4 = fmaf(v4, v33 * scale, KC_K((B) + 12)); \
  v5 = fmaf(v5, v28 * scale, KC_K((B) + 9)); v6 = fmaf(v6, v1 * scale, KC_K((B) + 10)); v7 = fmaf(v7, v14 * scale, KC_K((B) + 11)); v8 = fmaf(v8, v27 * scale, KC_K((B) + 12)); v9 = fmaf(v9, v0 * scale, KC_K((B) + 13)); \
  v10 = fmaf(v10, v35 * scale, KC_K((B) + 10)); v11 = fmaf(v11, v8 * scale, KC_K((B) + 11)); v12 = fmaf(v12, v21 * scale, KC_K((B) + 12)); v13 = fmaf(v13, v34 * scale, KC_K((B) + 13)); v14 = fmaf(v14, v7 * scale, KC_K((B) + 14)); \
  v15 = fmaf(v15, v2 * scale, KC_K((B) + 11)); v16 = fmaf(v16, v15 * scale, KC_K((B) + 12)); v17 = fmaf(v17, v28 * scale, KC_K((B) + 13)); v18 = fmaf(v18, v1 * scale, KC_K((B) + 14)); v19 = fmaf(v19, v14 * scale, KC_K((B) + 15)); \
  v20 = fmaf(v20, v9 * scale, KC_K((B) + 12)); v21 = fmaf(v21, v22 * scale, KC_K((B) + 13)); v22 = fmaf(v22, v35 * scale, KC_K((B) + 14)); v23 = fmaf(v23, v8 * scale, KC_K((B) + 15)); v24 = fmaf(v24, v21 * scale, KC_K((B) + 16)); \
  v25 = fmaf(v25, v16 * scale, KC_K((B) + 13)); v26 = fmaf(v26, v29 * scale, KC_K((B) + 14)); v27 = fmaf(v27, v2 * scale, KC_K((B) + 15)); v28 = fmaf(v28, v15 * scale, KC_K((B) + 16)); v29 = fmaf(v29, v28 * scale, KC_K((B) + 17)); \
  v30 = fmaf(v30, v23 * scale, KC_K((B) + 14)); v31 = fmaf(v31, v36 * scale, KC_K((B) + 15)); v32 = fmaf(v32, v9 * scale, KC_K((B) + 16)); v33 = fmaf(v33, v22 * scale, KC_K((B) + 17)); v34 = fmaf(v34, v35 * scale, KC_K((B) + 18)); \
  v35 = fmaf(v35, v30 * scale, KC_K((B) + 15)); v36 = fmaf(v36, v3 * scale, KC_K((B) + 16)); v37 = fmaf(v37, v16 * scale, KC_K((B) + 17)); v38 = fmaf(v38, v29 * scale, KC_K((B) + 18)); v39 = fmaf(v39, v2 * scale, KC_K((B) + 19)); \
  v0 = fmaf(v0, v37 * scale, KC_K((B) + 16)); v1 = fmaf(v1, v10 * scale, KC_K((B) + 17)); v2 = fmaf(v2, v23 * scale, KC_K((B) + 18)); v3 = fmaf(v3, v36 * scale, KC_K((B) + 19)); v4 = fmaf(v4, v9 * scale, KC_K((B) + 20)); \
  v5 = fmaf(v5, v4 * scale, KC_K((B) + 17)); v6 = fmaf(v6, v17 * scale, KC_K((B) + 18)); v7 = fmaf(v7, v30 * scale, KC_K((B) + 19)); v8 = fmaf(v8, v3 * scale, KC_K((B) + 20)); v9 = fmaf(v9, v16 * scale, KC_K((B) + 21)); \
  v10 = fmaf(v10, v11 * scale, KC_K((B) + 18)); v11 = fmaf(v11, v24 * scale, KC_K((B) + 19)); v12 = fmaf(v12, v37 * scale, KC_K((B) + 20)); v13 = fmaf(v13, v10 * scale, KC_K((B) + 21)); v14 = fmaf(v14, v23 * scale, KC_K((B) + 22)); \
  v15 = fmaf(v15, v18 * scale, KC_K((B) + 19)); v16 = fmaf(v16, v31 * scale, KC_K((B) + 20)); v17 = fmaf(v17, v4 * scale, KC_K((B) + 21)); v18 = fmaf(v18, v17 * scale, KC_K((B) + 22)); v19 = fmaf(v19, v30 * scale, KC_K((B) + 23)); \
  v20 = fmaf(v20, v25 * scale, KC_K((B) + 20)); v21 = fmaf(v21, v38 * scale, KC_K((B) + 21)); v22 = fmaf(v22, v11 * scale, KC_K((B) + 22)); v23 = fmaf(v23, v24 * scale, KC_K((B) + 23)); v24 = fmaf(v24, v37 * scale, KC_K((B) + 24)); \
  v25 = fmaf(v25, v32 * scale, KC_K((B) + 21)); v26 = fmaf(v26, v5 * scale, KC_K((B) + 22)); v27 = fmaf(v27, v18 * scale, KC_K((B) + 23)); v28 = fmaf(v28, v31 * scale, KC_K((B) + 24)); v29 = fmaf(v29, v4 * scale, KC_K((B) + 25)); \
  v30 = fmaf(v30, v39 * scale, KC_K((B) + 22)); v31 = fmaf(v31, v12 * scale, KC_K((B) + 23)); v32 = fmaf(v32, v25 * scale, KC_K((B) + 24)); v33 = fmaf(v33, v38 * scale, KC_K((B) + 25)); v34 = fmaf(v34, v11 * scale, KC_K((B) + 26)); \
  v35 = fmaf(v35, v6 * scale, KC_K((B) + 23)); v36 = fmaf(v36, v19 * scale, KC_K((B) + 24)); v37 = fmaf(v37, v32 * scale, KC_K((B) + 25)); v38 = fmaf(v38, v5 * scale, KC_K((B) + 26)); v39 = fmaf(v39, v18 * scale, KC_K((B) + 27)); \
  v0 = fmaf(v0, v13 * scale, KC_K((B) + 24)); v1 = fmaf(v1, v26 * scale, KC_K((B) + 25)); v2 = fmaf(v2, v39 * scale, KC_K((B) + 26)); v3 = fmaf(v3, v12 * scale, KC_K((B) + 27)); v4 = fmaf(v4, v25 * scale, KC_K((B) + 28)); \
  v5 = fmaf(v5, v20 * scale, KC_K((B) + 25)); v6 = fmaf(v6, v33 * scale, KC_K((B) + 26)); v7 = fmaf(v7, v6 * scale, KC_K((B) + 27)); v8 = fmaf(v8, v19 * scale, KC_K((B) + 28)); v9 = fmaf(v9, v32 * scale, KC_K((B) + 29)); \
  v10 = fmaf(v10, v27 * scale, KC_K((B) + 26)); v11 = fmaf(v11, v0 * scale, KC_K((B) + 27)); v12 = fmaf(v12, v13 * scale, KC_K((B) + 28)); v13 = fmaf(v13, v26 * scale, KC_K((B) + 29)); v14 = fmaf(v14, v39 * scale, KC_K((B) + 30)); \
  v15 = fmaf(v15, v34 * scale, KC_K((B) + 27)); v16 = fmaf(v16, v7 * scale, KC_K((B) + 28)); v17 = fmaf(v17, v20 * scale, KC_K((B) + 29)); v18 = fmaf(v18, v33 * scale, KC_K((B) + 30)); v19 = fmaf(v19, v6 * scale, KC_K((B) + 31)); \
  v20 = fmaf(v20, v1 * scale, KC_K((B) + 28)); v21 = fmaf(v21, v14 * scale, KC_K((B) + 29)); v22 = fmaf(v22, v27 * scale, KC_K((B) + 30)); v23 = fmaf(v23, v0 * scale, KC_K((B) + 31)); v24 = fmaf(v24, v13 * scale, KC_K((B) + 32)); \
  v25 = fmaf(v25, v8 * scale, KC_K((B) + 29)); v26 = fmaf(v26, v21 * scale, KC_K((B) + 30)); v27 = fmaf(v27, v34 * scale, KC_K((B) + 31)); v28 = fmaf(v28, v7 * scale, KC_K((B) + 32)); v29 = fmaf(v29, v20 * scale, KC_K((B) + 33)); \
  v30 = fmaf(v30, v15 * scale, KC_K((B) + 30)); v31 = fmaf(v31, v28 * scale, KC_K((B) + 31)); v32 = fmaf(v32, v1 * scale, KC_K((B) + 32)); v33 = fmaf(v33, v14 * scale, KC_K((B) + 33)); v34 = fmaf(v34, v27 * scale, KC_K((B) + 34)); \
  v35 = fmaf(v35, v22 * scale, KC_K((B) + 31)); v36 = fmaf(v36, v35 * scale, KC_K((B) + 32)); v37 = fmaf(v37, v8 * scale, KC_K((B) + 33)); v38 = fmaf(v38, v21 * scale, KC_K((B) + 34)); v39 = fmaf(v39, v34 * scale, KC_K((B) + 35));
#define KC_R4(B) KC_ROUND(B) KC_ROUND((B) + 32) KC_ROUND((B) + 64) KC_ROUND((B) + 96)
#define KC_R16(B) KC_R4(B) KC_R4((B) + 128) KC_R4((B) + 256) KC_R4((B) + 384)
#define KC_R128(B)                                                                                     \
  KC_R16(B) KC_R16((B) + 512) KC_R16((B) + 1024) KC_R16((B) + 1536) KC_R16((B) + 2048) KC_R16((B) + 2560) \
  KC_R16((B) + 3072) KC_R16((B) + 3584)

__constant__ float c_mix[64];

__global__ void __launch_bounds__(128) huge_fma_chain(const float* __restrict__ in, float* __restrict__ out, float scale) {
  const float* p = in + size_t(blockIdx.x * blockDim.x + threadIdx.x) * 40;
  float v0 = p[0], v1 = p[1], v2 = p[2], v3 = p[3], v4 = p[4], v5 = p[5], v6 = p[6], v7 = p[7];
  float v8 = p[8], v9 = p[9], v10 = p[10], v11 = p[11], v12 = p[12], v13 = p[13], v14 = p[14], v15 = p[15];
  float v16 = p[16], v17 = p[17], v18 = p[18], v19 = p[19], v20 = p[20], v21 = p[21], v22 = p[22], v23 = p[23];
  float v24 = p[24], v25 = p[25], v26 = p[26], v27 = p[27], v28 = p[28], v29 = p[29], v30 = p[30], v31 = p[31];
  float v32 = p[32], v33 = p[33], v34 = p[34], v35 = p[35], v36 = p[36], v37 = p[37], v38 = p[38], v39 = p[39];
  KC_R128(0)  // 128 rounds x 32 steps = 4096 steps
  out[blockIdx.x * blockDim.x + threadIdx.x] =
      1.f * v0 + 2.f * v1 + 3.f * v2 + 4.f * v3 + 5.f * v4 + 6.f * v5 + 7.f * v6 + 8.f * v7 +
      9.f * v8 + 10.f * v9 + 11.f * v10 + 12.f * v11 + 13.f * v12 + 14.f * v13 + 15.f * v14 + 16.f * v15 +
      17.f * v16 + 18.f * v17 + 19.f * v18 + 20.f * v19 + 21.f * v20 + 22.f * v21 + 23.f * v22 + 24.f * v23 +
      25.f * v24 + 26.f * v25 + 27.f * v26 + 28.f * v27 + 29.f * v28 + 30.f * v29 + 31.f * v30 + 32.f * v31 +
      33.f * v32 + 34.f * v33 + 35.f * v34 + 36.f * v35 + 37.f * v36 + 38.f * v37 + 39.f * v38 + 40.f * v39;
}

// The loop-based form for comparison: `#pragma unroll` on a 4096-trip loop, which LLVM unrolls only
// partially (by a factor it picks under its threshold), so this kernel stays small.
__global__ void __launch_bounds__(128) pragma_unroll_fma_chain(const float* __restrict__ in, float* __restrict__ out, float scale) {
  float a = in[blockIdx.x * blockDim.x + threadIdx.x], b = a * 0.5f, c = a * 0.25f, d = a * 0.125f;
#pragma unroll
  for (int s = 0; s < 4096; ++s) {
    a = fmaf(a, b * scale, c_mix[s & 63]);
    b = fmaf(b, c * scale, c_mix[(s + 1) & 63]);
    c = fmaf(c, d * scale, c_mix[(s + 2) & 63]);
    d = fmaf(d, a * scale, c_mix[(s + 3) & 63]);
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = a + b + c + d;
}

#undef KC_R128
#undef KC_R16
#undef KC_R4
#undef KC_ROUND
#undef KC_K
