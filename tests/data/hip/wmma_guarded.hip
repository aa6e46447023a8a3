// WMMA guarded for RDNA3 (`#if defined(__GFX11__)` / __gfx1100__..__gfx1103__) with f16, bf16 and iu8
// variants, a scalar fallback elsewhere (rocWMMA-style architecture dispatch inside one source).
#include <hip/hip_runtime.h>

#if defined(__gfx1100__) || defined(__gfx1101__) || defined(__gfx1102__) || defined(__gfx1103__)
#define KC_WMMA 1
#else
#define KC_WMMA 0
#endif

typedef _Float16 half16 __attribute__((ext_vector_type(16)));
typedef short short16 __attribute__((ext_vector_type(16)));
typedef float float8 __attribute__((ext_vector_type(8)));
typedef int int4v __attribute__((ext_vector_type(4)));
typedef int int8v __attribute__((ext_vector_type(8)));

__device__ inline float bf16_to_float(unsigned short v) { return __uint_as_float(static_cast<unsigned int>(v) << 16); }

__global__ void tile16_f16(const _Float16* __restrict__ a, const _Float16* __restrict__ b, float* __restrict__ c) {
#if KC_WMMA
  const int lane = threadIdx.x % 16;
  half16 af, bf;
  float8 acc = {};
  for (int e = 0; e < 16; ++e) {
    af[e] = a[16 * lane + e];
    bf[e] = b[16 * e + lane];
  }
  acc = __builtin_amdgcn_wmma_f32_16x16x16_f16_w32(af, bf, acc);
  for (int e = 0; e < 8; ++e) c[16 * (2 * e + threadIdx.x / 16) + lane] = acc[e];
#else
  for (int idx = threadIdx.x; idx < 256; idx += blockDim.x) {
    float s = 0.0f;
    for (int k = 0; k < 16; ++k) s += static_cast<float>(a[16 * (idx / 16) + k]) * static_cast<float>(b[16 * k + idx % 16]);
    c[idx] = s;
  }
#endif
}

__global__ void tile16_bf16(const unsigned short* __restrict__ a, const unsigned short* __restrict__ b,
                            float* __restrict__ c) {
#if KC_WMMA
  const int lane = threadIdx.x % 16;
  short16 af, bf;
  float8 acc = {};
  for (int e = 0; e < 16; ++e) {
    af[e] = static_cast<short>(a[16 * lane + e]);
    bf[e] = static_cast<short>(b[16 * e + lane]);
  }
  acc = __builtin_amdgcn_wmma_f32_16x16x16_bf16_w32(af, bf, acc);
  for (int e = 0; e < 8; ++e) c[16 * (2 * e + threadIdx.x / 16) + lane] = acc[e];
#else
  for (int idx = threadIdx.x; idx < 256; idx += blockDim.x) {
    float s = 0.0f;
    for (int k = 0; k < 16; ++k) s += bf16_to_float(a[16 * (idx / 16) + k]) * bf16_to_float(b[16 * k + idx % 16]);
    c[idx] = s;
  }
#endif
}

// Signed int8 with int32 accumulation; 16 bytes of a row per lane packed into 4 ints.
__global__ void tile16_i8(const int* __restrict__ a4, const int* __restrict__ b4, int* __restrict__ c) {
#if KC_WMMA
  const int lane = threadIdx.x % 16;
  int4v af, bf;
  int8v acc = {};
  for (int e = 0; e < 4; ++e) {
    af[e] = a4[4 * lane + e];
    bf[e] = b4[4 * lane + e];  // B stored column-major
  }
  acc = __builtin_amdgcn_wmma_i32_16x16x16_iu8_w32(true, af, true, bf, acc, false);
  for (int e = 0; e < 8; ++e) c[16 * (2 * e + threadIdx.x / 16) + lane] = acc[e];
#else
  for (int idx = threadIdx.x; idx < 256; idx += blockDim.x) {
    int s = 0;
    for (int k = 0; k < 16; ++k) {
      const signed char av = static_cast<signed char>(a4[4 * (idx / 16) + k / 4] >> (8 * (k % 4)));
      const signed char bv = static_cast<signed char>(b4[4 * (idx % 16) + k / 4] >> (8 * (k % 4)));
      s += av * bv;
    }
    c[idx] = s;
  }
#endif
}
