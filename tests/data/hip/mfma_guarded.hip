// MFMA guarded the way portable HIP libraries do: `#if defined(__gfx90a__) || defined(__gfx942__)`
// selects the matrix-core path (f16, bf16_1k, f64, and i8 with the gfx942 K=16 variant), else a scalar fallback.
#include <hip/hip_runtime.h>

#if defined(__gfx908__) || defined(__gfx90a__) || defined(__gfx940__) || defined(__gfx941__) || defined(__gfx942__)
#define HAS_MFMA 1
#else
#define HAS_MFMA 0
#endif

typedef _Float16 half4 __attribute__((ext_vector_type(4)));
typedef short short4_ __attribute__((ext_vector_type(4)));
typedef float floatx4 __attribute__((ext_vector_type(4)));
typedef double doublex4 __attribute__((ext_vector_type(4)));
typedef int intx4 __attribute__((ext_vector_type(4)));

// 16x16 tile of C += A*B for K; one wave of 64 lanes on CDNA, any block on the fallback.
__global__ void gemm16_f16(const _Float16* __restrict__ A, const _Float16* __restrict__ B, float* __restrict__ C, int K) {
#if HAS_MFMA
  const int lane = threadIdx.x % 64;
  floatx4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < K; k0 += 16) {
    half4 a, b;
    for (int i = 0; i < 4; ++i) {
      a[i] = A[(lane % 16) * K + k0 + 4 * (lane / 16) + i];
      b[i] = B[(k0 + 4 * (lane / 16) + i) * 16 + lane % 16];
    }
    acc = __builtin_amdgcn_mfma_f32_16x16x16f16(a, b, acc, 0, 0, 0);
  }
  for (int i = 0; i < 4; ++i) C[(4 * (lane / 16) + i) * 16 + lane % 16] += acc[i];
#else
  for (int idx = threadIdx.x; idx < 256; idx += blockDim.x) {
    const int r = idx / 16, c = idx % 16;
    float s = 0.0f;
    for (int k = 0; k < K; ++k) s += static_cast<float>(A[r * K + k]) * static_cast<float>(B[k * 16 + c]);
    C[idx] += s;
  }
#endif
}

// bf16 (as raw shorts) with the gfx90a "_1k" instructions.
__global__ void gemm16_bf16(const short* __restrict__ A, const short* __restrict__ B, float* __restrict__ C, int K) {
#if defined(__gfx90a__) || defined(__gfx942__)
  const int lane = threadIdx.x % 64;
  floatx4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < K; k0 += 16) {
    short4_ a, b;
    for (int i = 0; i < 4; ++i) {
      a[i] = A[(lane % 16) * K + k0 + 4 * (lane / 16) + i];
      b[i] = B[(k0 + 4 * (lane / 16) + i) * 16 + lane % 16];
    }
    acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, acc, 0, 0, 0);
  }
  for (int i = 0; i < 4; ++i) C[(4 * (lane / 16) + i) * 16 + lane % 16] += acc[i];
#else
  auto bf = [](short v) { return __uint_as_float(static_cast<unsigned int>(static_cast<unsigned short>(v)) << 16); };
  for (int idx = threadIdx.x; idx < 256; idx += blockDim.x) {
    float s = 0.0f;
    for (int k = 0; k < K; ++k) s += bf(A[(idx / 16) * K + k]) * bf(B[k * 16 + idx % 16]);
    C[idx] += s;
  }
#endif
}

// FP64 matrix cores (gfx90a+): DGEMM 16x16x4.
__global__ void gemm16_f64(const double* __restrict__ A, const double* __restrict__ B, double* __restrict__ C, int K) {
#if defined(__gfx90a__) || defined(__gfx942__)
  const int lane = threadIdx.x % 64;
  doublex4 acc = {0.0, 0.0, 0.0, 0.0};
  for (int k0 = 0; k0 < K; k0 += 4) {
    const double a = A[(lane % 16) * K + k0 + lane / 16];
    const double b = B[(k0 + lane / 16) * 16 + lane % 16];
    acc = __builtin_amdgcn_mfma_f64_16x16x4f64(a, b, acc, 0, 0, 0);
  }
  for (int i = 0; i < 4; ++i) C[(4 * (lane / 16) + i) * 16 + lane % 16] += acc[i];
#else
  for (int idx = threadIdx.x; idx < 256; idx += blockDim.x) {
    double s = 0.0;
    for (int k = 0; k < K; ++k) s = fma(A[(idx / 16) * K + k], B[k * 16 + idx % 16], s);
    C[idx] += s;
  }
#endif
}

// int8: gfx90a has i32_16x16x16i8; gfx942 replaced it with i32_16x16x32_i8 (K doubled, 64-bit operands).
__global__ void gemm16_i8(const int* __restrict__ A4, const int* __restrict__ B4, int* __restrict__ C, int K) {
  const int lane = threadIdx.x % 64;
#if defined(__gfx942__)
  intx4 acc = {0, 0, 0, 0};
  for (int k0 = 0; k0 < K; k0 += 32) {
    const long a = *reinterpret_cast<const long*>(&A4[((lane % 16) * K + k0 + 8 * (lane / 16)) / 4]);
    const long b = *reinterpret_cast<const long*>(&B4[((lane % 16) * K + k0 + 8 * (lane / 16)) / 4]);
    acc = __builtin_amdgcn_mfma_i32_16x16x32_i8(a, b, acc, 0, 0, 0);
  }
  for (int i = 0; i < 4; ++i) C[(4 * (lane / 16) + i) * 16 + lane % 16] += acc[i];
#elif defined(__gfx90a__) || defined(__gfx908__)
  intx4 acc = {0, 0, 0, 0};
  for (int k0 = 0; k0 < K; k0 += 16) {
    const int a = A4[((lane % 16) * K + k0 + 4 * (lane / 16)) / 4];
    const int b = B4[((lane % 16) * K + k0 + 4 * (lane / 16)) / 4];
    acc = __builtin_amdgcn_mfma_i32_16x16x16i8(a, b, acc, 0, 0, 0);
  }
  for (int i = 0; i < 4; ++i) C[(4 * (lane / 16) + i) * 16 + lane % 16] += acc[i];
#else
  for (int idx = threadIdx.x; idx < 256; idx += blockDim.x) {
    int s = 0;
    for (int k4 = 0; k4 < K / 4; ++k4) {
      const int a = A4[(idx / 16) * (K / 4) + k4], b = B4[(idx % 16) * (K / 4) + k4];
#if defined(__gfx1030__)
      s = __builtin_amdgcn_sdot4(a, b, s, false);  // v_dot4_i32_i8 (dot1-insts: gfx1030 has it, gfx11 does not)
#else
      for (int j = 0; j < 4; ++j) s += static_cast<signed char>(a >> (8 * j)) * static_cast<signed char>(b >> (8 * j));
#endif
    }
    C[idx] += s;
  }
  (void)lane;
#endif
}
