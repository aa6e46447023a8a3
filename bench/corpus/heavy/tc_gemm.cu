// Tensor-core GEMMs written the way the CUDA samples' cudaTensorCoreGemm, bf16TensorCoreGemm,
// tf32TensorCoreGemm and dmmaTensorCoreGemm are: a block of 8 warps computes a 128x128 tile of C,
// each warp a 2x4 grid of WMMA fragments, over K in passes of 16 fragments staged through shared
// memory, with the loops unrolled. Four element types, each for any K and specialized for K = 512
// (whose passes unroll whole): the heaviest modules a build farm assembles.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

namespace {

constexpr int kWarps = 8;
constexpr int kBlockRows = 128, kBlockCols = 128;
constexpr int kWarpRowTiles = 2, kWarpColTiles = 4;
constexpr int kChunkK = 16;  // fragments of K staged per pass
constexpr int kSkew = 8;    // shared-memory padding against bank conflicts

// FixedK: K known when compiled (0: at run time), as libraries specialize their kernels for the
// shapes a model uses; its passes are unrolled whole.
template <typename In, typename Acc, int M, int N, int K, typename Frag = In, int FixedK = 0>
__device__ void gemm_tile(const In* __restrict__ a, const In* __restrict__ b, const Acc* __restrict__ c,
                          Acc* __restrict__ d, int m_global, int n_global, int k_runtime, Acc alpha, Acc beta) {
  const int k_global = FixedK > 0 ? FixedK : k_runtime;
  extern __shared__ __align__(128) unsigned char shared_bytes[];
  In* shmem = reinterpret_cast<In*>(shared_bytes);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int block_row = blockIdx.y * kBlockRows, block_col = blockIdx.x * kBlockCols;
  const int warp_row = (warp / 2) * (kWarpRowTiles * M), warp_col = (warp % 2) * (kWarpColTiles * N);

  wmma::fragment<wmma::accumulator, M, N, K, Acc> acc[kWarpRowTiles][kWarpColTiles];
#pragma unroll
  for (int i = 0; i < kWarpRowTiles; ++i) {
#pragma unroll
    for (int j = 0; j < kWarpColTiles; ++j) wmma::fill_fragment(acc[i][j], Acc(0));
  }

  const int lda = kChunkK * K + kSkew;
  In* a_tile = shmem;
  In* b_tile = shmem + kBlockRows * lda;
  auto pass = [&](int k0) {
    // Stage A (128 x kChunkK*K) and B (kChunkK*K x 128) through shared memory, every thread copying.
#pragma unroll 4
    for (int e = threadIdx.x; e < kBlockRows * kChunkK * K; e += kWarps * 32) {
      int r = e / (kChunkK * K), col = e % (kChunkK * K);
      a_tile[r * lda + col] = a[(size_t)(block_row + r) * k_global + k0 + col];
      b_tile[r * lda + col] = b[(size_t)(block_col + r) * k_global + k0 + col];
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kChunkK; ++kk) {
      wmma::fragment<wmma::matrix_a, M, N, K, Frag, wmma::row_major> fa[kWarpRowTiles];
      wmma::fragment<wmma::matrix_b, M, N, K, Frag, wmma::col_major> fb[kWarpColTiles];
#pragma unroll
      for (int i = 0; i < kWarpRowTiles; ++i) {
        wmma::load_matrix_sync(fa[i], a_tile + (warp_row + i * M) * lda + kk * K, lda);
      }
#pragma unroll
      for (int j = 0; j < kWarpColTiles; ++j) {
        wmma::load_matrix_sync(fb[j], b_tile + (warp_col + j * N) * lda + kk * K, lda);
      }
#pragma unroll
      for (int i = 0; i < kWarpRowTiles; ++i) {
#pragma unroll
        for (int j = 0; j < kWarpColTiles; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
      }
    }
    __syncthreads();
  };
  if constexpr (FixedK > 0) {
#pragma unroll
    for (int k0 = 0; k0 < FixedK; k0 += kChunkK * K) pass(k0);
  } else {
    for (int k0 = 0; k0 < k_global; k0 += kChunkK * K) pass(k0);
  }

  // D = alpha * A*B + beta * C, fragment by fragment.
#pragma unroll
  for (int i = 0; i < kWarpRowTiles; ++i) {
#pragma unroll
    for (int j = 0; j < kWarpColTiles; ++j) {
      size_t at = (size_t)(block_row + warp_row + i * M) * n_global + block_col + warp_col + j * N;
      wmma::fragment<wmma::accumulator, M, N, K, Acc> cf;
      wmma::load_matrix_sync(cf, c + at, n_global, wmma::mem_row_major);
#pragma unroll
      for (int t = 0; t < cf.num_elements; ++t) cf.x[t] = alpha * acc[i][j].x[t] + beta * cf.x[t];
      wmma::store_matrix_sync(d + at, cf, n_global, wmma::mem_row_major);
    }
  }
  (void)lane;
  (void)m_global;
}

}  // namespace

extern "C" __global__ void __launch_bounds__(256) gemm_f16(const half* a, const half* b, const float* c, float* d, int m,
                                                            int n, int k, float alpha, float beta) {
  gemm_tile<half, float, 16, 16, 16>(a, b, c, d, m, n, k, alpha, beta);
}

extern "C" __global__ void __launch_bounds__(256) gemm_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                             const float* c, float* d, int m, int n, int k, float alpha,
                                                             float beta) {
  gemm_tile<__nv_bfloat16, float, 16, 16, 16>(a, b, c, d, m, n, k, alpha, beta);
}

extern "C" __global__ void __launch_bounds__(256) gemm_tf32(const float* a, const float* b, const float* c, float* d,
                                                             int m, int n, int k, float alpha, float beta) {
  gemm_tile<float, float, 16, 16, 8, wmma::precision::tf32>(a, b, c, d, m, n, k, alpha, beta);
}

extern "C" __global__ void __launch_bounds__(256) gemm_f64(const double* a, const double* b, const double* c, double* d,
                                                            int m, int n, int k, double alpha, double beta) {
  gemm_tile<double, double, 8, 8, 4>(a, b, c, d, m, n, k, alpha, beta);
}

// The same four, specialized for K = 512.
extern "C" __global__ void __launch_bounds__(256) gemm_f16_k512(const half* a, const half* b, const float* c, float* d,
                                                                 int m, int n, int k, float alpha, float beta) {
  gemm_tile<half, float, 16, 16, 16, half, 512>(a, b, c, d, m, n, k, alpha, beta);
}

extern "C" __global__ void __launch_bounds__(256) gemm_bf16_k512(const __nv_bfloat16* a, const __nv_bfloat16* b,
                                                                  const float* c, float* d, int m, int n, int k,
                                                                  float alpha, float beta) {
  gemm_tile<__nv_bfloat16, float, 16, 16, 16, __nv_bfloat16, 512>(a, b, c, d, m, n, k, alpha, beta);
}

extern "C" __global__ void __launch_bounds__(256) gemm_tf32_k512(const float* a, const float* b, const float* c,
                                                                  float* d, int m, int n, int k, float alpha,
                                                                  float beta) {
  gemm_tile<float, float, 16, 16, 8, wmma::precision::tf32, 512>(a, b, c, d, m, n, k, alpha, beta);
}

extern "C" __global__ void __launch_bounds__(256) gemm_f64_k512(const double* a, const double* b, const double* c,
                                                                 double* d, int m, int n, int k, double alpha,
                                                                 double beta) {
  gemm_tile<double, double, 8, 8, 4, double, 512>(a, b, c, d, m, n, k, alpha, beta);
}
