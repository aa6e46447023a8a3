// Tensor cores through `nvcuda::wmma` with double precision (m8n8k4 f64 DMMA, sm_80+): a DGEMM panel update and a Cholesky trailing update.
#include <mma.h>

using namespace nvcuda;

// C -= A * B^T for 8x8 tiles, as in the trailing-matrix update of a blocked Cholesky/LU.
__global__ void dgemm_nt_update(const double* __restrict__ A, const double* __restrict__ B, double* __restrict__ C, int M,
                                int N, int K, int lda, int ldb, int ldc) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int tiles_n = N / 8;
  const int tm = warp / tiles_n, tn = warp % tiles_n;
  if (tm * 8 >= M) return;
  wmma::fragment<wmma::matrix_a, 8, 8, 4, double, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 8, 8, 4, double, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 8, 8, 4, double> acc;
  double* pc = C + size_t(tm * 8) * ldc + tn * 8;
  wmma::load_matrix_sync(acc, pc, ldc, wmma::mem_row_major);
#pragma unroll
  for (int e = 0; e < acc.num_elements; ++e) acc.x[e] = -acc.x[e];
  for (int k = 0; k < K; k += 4) {
    wmma::load_matrix_sync(fa, A + size_t(tm * 8) * lda + k, lda);
    wmma::load_matrix_sync(fb, B + size_t(tn * 8) * ldb + k, ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
#pragma unroll
  for (int e = 0; e < acc.num_elements; ++e) acc.x[e] = -acc.x[e];
  wmma::store_matrix_sync(pc, acc, ldc, wmma::mem_row_major);
}

// A block of 4 warps computing a 16x16 tile from shared memory with double fragments, column-major output.
__global__ void __launch_bounds__(128) dgemm_smem(const double* __restrict__ A, const double* __restrict__ B,
                                                  double* __restrict__ C, int N, int K) {
  __shared__ double sA[16][8 + 1];
  __shared__ double sB[8][16 + 1];
  const int warp = threadIdx.x / 32;
  const int wm = warp / 2, wn = warp % 2;
  const int bm = blockIdx.y * 16, bn = blockIdx.x * 16;
  wmma::fragment<wmma::accumulator, 8, 8, 4, double> acc;
  wmma::fill_fragment(acc, 0.0);
  for (int k0 = 0; k0 < K; k0 += 8) {
    for (int t = threadIdx.x; t < 128; t += blockDim.x) {
      sA[t / 8][t % 8] = A[size_t(bm + t / 8) * K + k0 + t % 8];
      sB[t / 16][t % 16] = B[size_t(k0 + t / 16) * N + bn + t % 16];
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 8; kk += 4) {
      wmma::fragment<wmma::matrix_a, 8, 8, 4, double, wmma::row_major> fa;
      wmma::fragment<wmma::matrix_b, 8, 8, 4, double, wmma::row_major> fb;
      wmma::load_matrix_sync(fa, &sA[wm * 8][kk], 9);
      wmma::load_matrix_sync(fb, &sB[kk][wn * 8], 17);
      wmma::mma_sync(acc, fa, fb, acc);
    }
    __syncthreads();
  }
  wmma::store_matrix_sync(C + size_t(bn + wn * 8) * N + bm + wm * 8, acc, N, wmma::mem_col_major);
}
