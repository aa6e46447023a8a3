// Tensor cores through `nvcuda::wmma` with int8 (s8 and u8) inputs and int32 accumulators: a quantised GEMM with requantisation.
#include <mma.h>
#include <cstdint>

using namespace nvcuda;

// Y_q = clamp(round((A_q * B_q) * scale_a * scale_b[n] / scale_y) + zero_y), per-channel weight scales.
template <typename TA, int M_, int N_, int K_>
__global__ void qgemm_requant(const TA* __restrict__ A, const signed char* __restrict__ B, const float* __restrict__ scale_b,
                              float scale_a, float inv_scale_y, int zero_y, int8_t* __restrict__ Y, int M, int N, int K) {
  __shared__ __align__(32) int tile[8][M_ * N_];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * (blockDim.x / 32) + warp;
  const int tm = t / (N / N_), tn = t % (N / N_);
  if (tm * M_ >= M) return;
  wmma::fragment<wmma::matrix_a, M_, N_, K_, TA, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, M_, N_, K_, TA, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, M_, N_, K_, int> acc;
  wmma::fill_fragment(acc, 0);
  for (int k = 0; k < K; k += K_) {
    wmma::load_matrix_sync(fa, A + size_t(tm * M_) * K + k, K);
    wmma::load_matrix_sync(fb, reinterpret_cast<const TA*>(B) + size_t(tn * N_) * K + k, K);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(tile[warp & 7], acc, N_, wmma::mem_row_major);
  __syncwarp();
  for (int e = lane; e < M_ * N_; e += 32) {
    const int r = e / N_, c = e % N_;
    const float real = tile[warp & 7][e] * scale_a * scale_b[tn * N_ + c];
    int q = __float2int_rn(real * inv_scale_y) + zero_y;
    q = max(-128, min(127, q));
    Y[size_t(tm * M_ + r) * N + tn * N_ + c] = static_cast<int8_t>(q);
  }
}

#define KC_QGEMM(TA, M_, N_, K_)                                                                             \
  template __global__ void qgemm_requant<TA, M_, N_, K_>(const TA*, const signed char*, const float*, float, float, \
                                                         int, int8_t*, int, int, int);
KC_QGEMM(signed char, 16, 16, 16)
KC_QGEMM(signed char, 32, 8, 16)
KC_QGEMM(signed char, 8, 32, 16)
KC_QGEMM(unsigned char, 16, 16, 16)
#undef KC_QGEMM
