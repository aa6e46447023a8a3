// Tensor cores through `nvcuda::wmma` with f16 inputs: a shared-memory-staged HGEMM (f32 and f16 accumulators) with a bias+ReLU epilogue.
#include <mma.h>
#include <cuda_fp16.h>

using namespace nvcuda;

namespace {
constexpr int WM = 16, WN = 16, WK = 16;
constexpr int kWarpsM = 2, kWarpsN = 2;       // 4 warps per block
constexpr int BM = WM * kWarpsM * 2;          // each warp computes 2x2 fragments
constexpr int BN = WN * kWarpsN * 2;
constexpr int BK = 32;
constexpr int kPad = 8;                       // halves of padding against bank conflicts
}  // namespace

// C[M,N] = relu(A[M,K] * B[K,N] + bias[N]); A row-major, B row-major, M,N,K multiples of the tiles.
template <typename Acc>
__global__ void __launch_bounds__(128) hgemm_bias_relu(const half* __restrict__ A, const half* __restrict__ B,
                                                       const Acc* __restrict__ bias, Acc* __restrict__ C, int M, int N, int K) {
  __shared__ __align__(32) half sA[BM][BK + kPad];
  __shared__ __align__(32) half sB[BK][BN + kPad];
  __shared__ __align__(32) Acc sC[kWarpsM * kWarpsN][WM * WN];
  const int warp = threadIdx.x / 32;
  const int wm = warp / kWarpsN, wn = warp % kWarpsN;
  const int bm = blockIdx.y * BM, bn = blockIdx.x * BN;
  if (bm >= M) return;  // grids are rounded up to whole tiles

  wmma::fragment<wmma::accumulator, WM, WN, WK, Acc> acc[2][2];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], Acc(0));

  for (int k0 = 0; k0 < K; k0 += BK) {
    for (int t = threadIdx.x; t < BM * BK / 8; t += blockDim.x) {  // 16-byte vector copies
      const int r = t / (BK / 8), c = (t % (BK / 8)) * 8;
      *reinterpret_cast<int4*>(&sA[r][c]) = *reinterpret_cast<const int4*>(&A[size_t(bm + r) * K + k0 + c]);
    }
    for (int t = threadIdx.x; t < BK * BN / 8; t += blockDim.x) {
      const int r = t / (BN / 8), c = (t % (BN / 8)) * 8;
      *reinterpret_cast<int4*>(&sB[r][c]) = *reinterpret_cast<const int4*>(&B[size_t(k0 + r) * N + bn + c]);
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; kk += WK) {
      wmma::fragment<wmma::matrix_a, WM, WN, WK, half, wmma::row_major> fa[2];
      wmma::fragment<wmma::matrix_b, WM, WN, WK, half, wmma::row_major> fb[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], &sA[(wm * 2 + i) * WM][kk], BK + kPad);
#pragma unroll
      for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], &sB[kk][(wn * 2 + j) * WN], BN + kPad);
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
    }
    __syncthreads();
  }
  // Epilogue through shared memory: add bias, ReLU, store.
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      wmma::store_matrix_sync(sC[warp], acc[i][j], WN, wmma::mem_row_major);
      __syncwarp();
      const int row0 = bm + (wm * 2 + i) * WM, col0 = bn + (wn * 2 + j) * WN;
      for (int e = lane; e < WM * WN; e += 32) {
        const int r = e / WN, c = e % WN;
        Acc v = sC[warp][e] + bias[col0 + c];
        C[size_t(row0 + r) * N + col0 + c] = v > Acc(0) ? v : Acc(0);
      }
      __syncwarp();
    }
}

template __global__ void hgemm_bias_relu<float>(const half*, const half*, const float*, float*, int, int, int);
template __global__ void hgemm_bias_relu<half>(const half*, const half*, const half*, half*, int, int, int);

// The other f16 shapes: m32n8k16 and m8n32k16 fragments, column-major A, accumulate in place.
__global__ void hgemm_skinny(const half* __restrict__ A, const half* __restrict__ B, float* __restrict__ C, int K) {
  wmma::fragment<wmma::matrix_a, 32, 8, 16, half, wmma::col_major> a32;
  wmma::fragment<wmma::matrix_b, 32, 8, 16, half, wmma::row_major> b8;
  wmma::fragment<wmma::accumulator, 32, 8, 16, float> c32;
  wmma::fragment<wmma::matrix_a, 8, 32, 16, half, wmma::row_major> a8;
  wmma::fragment<wmma::matrix_b, 8, 32, 16, half, wmma::col_major> b32;
  wmma::fragment<wmma::accumulator, 8, 32, 16, float> c8;
  wmma::load_matrix_sync(c32, C, 8, wmma::mem_row_major);
  wmma::fill_fragment(c8, 0.f);
  for (int k = 0; k < K; k += 16) {
    wmma::load_matrix_sync(a32, A + k * 32, 32);
    wmma::load_matrix_sync(b8, B + k * 8, 8);
    wmma::mma_sync(c32, a32, b8, c32);
    wmma::load_matrix_sync(a8, A + k * 8, K);
    wmma::load_matrix_sync(b32, B + k, K);
    wmma::mma_sync(c8, a8, b32, c8);
  }
  wmma::store_matrix_sync(C, c32, 8, wmma::mem_row_major);
  wmma::store_matrix_sync(C + 256, c8, 32, wmma::mem_row_major);
}
