// sm_90a warpgroup MMA: `wgmma.mma_async` (f16 and bf16, smem descriptors), `wgmma.fence/commit_group/wait_group`, and `setmaxnreg` warp specialisation.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <type_traits>

namespace wg {

__device__ __forceinline__ uint32_t smem(const void* p) { return static_cast<uint32_t>(__cvta_generic_to_shared(p)); }

// Shared-memory matrix descriptor (no swizzle, "interleaved" 8x8 core matrices): start address,
// leading-dimension byte offset and stride byte offset, all >> 4.
__device__ __forceinline__ uint64_t make_desc(const void* p, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  uint64_t d = 0;
  d |= uint64_t((smem(p) & 0x3ffff) >> 4);
  d |= uint64_t((lbo_bytes & 0x3ffff) >> 4) << 16;
  d |= uint64_t((sbo_bytes & 0x3ffff) >> 4) << 32;
  return d;  // base offset 0, swizzle mode 0 (bits 62-63)
}

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory"); }

// D[64x32] (+)= A[64x16] * B[16x32]; 16 f32 accumulators per thread of the warpgroup.
template <bool kBf16>
__device__ __forceinline__ void mma_m64n32k16(float (&d)[16], uint64_t da, uint64_t db, int scale_d) {
  if constexpr (kBf16) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"(scale_d));
  } else {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 1;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "l"(da), "l"(db), "r"(scale_d));
  }
}

}  // namespace wg

// One warpgroup (128 threads) per 64x32 output tile; A [M,K] row-major, B [K,N] stored N-major
// (transposed flag set in the instruction), copied to shared memory in core-matrix order.
template <typename T>
__global__ void __launch_bounds__(128) wgmma_gemm_64x32(const T* __restrict__ A, const T* __restrict__ B, float* __restrict__ C,
                                                        int M, int N, int K) {
  constexpr bool kBf16 = !std::is_same<T, __half>::value;
  __shared__ __align__(128) T sA[64 * 16];  // 8 row-groups x 2 k-groups of 8x8 core matrices
  __shared__ __align__(128) T sB[16 * 32];  // 2 k-groups x 4 n-groups
  const int bm = blockIdx.y * 64, bn = blockIdx.x * 32;
  float d[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) d[i] = 0.f;
  for (int k0 = 0; k0 < K; k0 += 16) {
    for (int e = threadIdx.x; e < 64 * 16; e += 128) {
      const int r = e / 16, c = e % 16;
      // core matrix (r/8, c/8), element (r%8, c%8); core matrices are 128 contiguous bytes
      sA[((r / 8) * 2 + c / 8) * 64 + (r % 8) * 8 + c % 8] = A[size_t(bm + r) * K + k0 + c];
    }
    for (int e = threadIdx.x; e < 16 * 32; e += 128) {
      const int kk = e / 32, n = e % 32;
      sB[((n / 8) * 2 + kk / 8) * 64 + (kk % 8) * 8 + n % 8] = B[size_t(k0 + kk) * N + bn + n];
    }
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();
    const uint64_t da = wg::make_desc(sA, 128, 256);
    const uint64_t db = wg::make_desc(sB, 128, 256);
    wg::fence();
    wg::mma_m64n32k16<kBf16>(d, da, db, k0 > 0);
    wg::commit();
    wg::wait<0>();
    __syncthreads();
  }
  // Accumulator layout: warp w holds rows 16w..16w+15; thread t of the warp holds rows t/4 and t/4+8,
  // columns 8j + 2(t%4) + {0,1}.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int row = bm + warp * 16 + lane / 4, col = bn + j * 8 + (lane % 4) * 2;
    if (row < M) *reinterpret_cast<float2*>(&C[size_t(row) * N + col]) = make_float2(d[j * 4 + 0], d[j * 4 + 1]);
    if (row + 8 < M) *reinterpret_cast<float2*>(&C[size_t(row + 8) * N + col]) = make_float2(d[j * 4 + 2], d[j * 4 + 3]);
  }
}

template __global__ void wgmma_gemm_64x32<__half>(const __half*, const __half*, float*, int, int, int);
template __global__ void wgmma_gemm_64x32<__nv_bfloat16>(const __nv_bfloat16*, const __nv_bfloat16*, float*, int, int, int);

// Warp-specialised layout (as in FlashAttention-3 / CUTLASS ping-pong): warpgroup 0 is the producer and
// gives registers away with setmaxnreg.dec, warpgroup 1 is the consumer and takes them with setmaxnreg.inc.
__global__ void __launch_bounds__(256, 1) wgmma_producer_consumer(const __half* __restrict__ A, const __half* __restrict__ B,
                                                                  float* __restrict__ C, int K) {
  __shared__ __align__(128) __half sA[2][64 * 16];
  __shared__ __align__(128) __half sB[2][16 * 32];
  const int wgi = threadIdx.x / 128, t = threadIdx.x % 128;
  if (wgi == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    for (int k0 = 0, it = 0; k0 < K; k0 += 16, ++it) {
      const int s = it & 1;
      for (int e = t; e < 64 * 16; e += 128) sA[s][((e / 16 / 8) * 2 + (e % 16) / 8) * 64 + (e / 16 % 8) * 8 + e % 8] = A[size_t(e / 16) * K + k0 + e % 16];
      for (int e = t; e < 16 * 32; e += 128) sB[s][(((e % 32) / 8) * 2 + (e / 32) / 8) * 64 + ((e / 32) % 8) * 8 + e % 8] = B[size_t(k0 + e / 32) * 32 + e % 32];
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      asm volatile("bar.sync 1, 256;\n" ::: "memory");  // stage s full
      asm volatile("bar.sync 2, 256;\n" ::: "memory");  // stage s consumed
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    float d[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) d[i] = 0.f;
    for (int k0 = 0, it = 0; k0 < K; k0 += 16, ++it) {
      const int s = it & 1;
      asm volatile("bar.sync 1, 256;\n" ::: "memory");
      wg::fence();
      wg::mma_m64n32k16<false>(d, wg::make_desc(sA[s], 128, 256), wg::make_desc(sB[s], 128, 256), 1);
      wg::commit();
      wg::wait<0>();
      asm volatile("bar.sync 2, 256;\n" ::: "memory");
    }
    const int warp = t / 32, lane = t % 32;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = warp * 16 + lane / 4, col = j * 8 + (lane % 4) * 2;
      C[row * 32 + col] = d[j * 4];
      C[row * 32 + col + 1] = d[j * 4 + 1];
      C[(row + 8) * 32 + col] = d[j * 4 + 2];
      C[(row + 8) * 32 + col + 1] = d[j * 4 + 3];
    }
  }
}
