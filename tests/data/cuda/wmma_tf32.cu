// Tensor cores through `nvcuda::wmma` with tf32 (`wmma::precision::tf32`, m16n16k8, sm_80+): an FP32-in/FP32-out GEMM with explicit tf32 rounding.
#include <mma.h>

using namespace nvcuda;

template <int kWarpsPerBlock>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) sgemm_tf32(const float* __restrict__ A, const float* __restrict__ B,
                                                                  float* __restrict__ C, int M, int N, int K) {
  __shared__ __align__(32) float sA[kWarpsPerBlock][16 * 8];
  __shared__ __align__(32) float sB[kWarpsPerBlock][8 * 16];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tile = blockIdx.x * kWarpsPerBlock + warp;
  const int tm = tile / (N / 16), tn = tile % (N / 16);
  if (tm * 16 >= M) return;
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
  wmma::fill_fragment(acc, 0.f);
  for (int k = 0; k < K; k += 8) {
    // Stage through shared memory, rounding to tf32 on the way (as cuBLAS's TF32 mode does).
    for (int e = lane; e < 128; e += 32) {
      sA[warp][e] = wmma::__float_to_tf32(A[size_t(tm * 16 + e / 8) * K + k + e % 8]);
      sB[warp][e] = wmma::__float_to_tf32(B[size_t(k + e / 16) * N + tn * 16 + e % 16]);
    }
    __syncwarp();
    wmma::load_matrix_sync(fa, sA[warp], 8);
    wmma::load_matrix_sync(fb, sB[warp], 16);
    wmma::mma_sync(acc, fa, fb, acc);
    __syncwarp();
  }
  wmma::store_matrix_sync(C + size_t(tm * 16) * N + tn * 16, acc, N, wmma::mem_row_major);
}

template __global__ void sgemm_tf32<1>(const float*, const float*, float*, int, int, int);
template __global__ void sgemm_tf32<4>(const float*, const float*, float*, int, int, int);
template __global__ void sgemm_tf32<8>(const float*, const float*, float*, int, int, int);

// tf32 fragments loaded straight from global memory, with the rounding applied to fragment elements.
__global__ void conv1x1_tf32(const float* __restrict__ in, const float* __restrict__ w, float* __restrict__ out, int pixels,
                             int cin, int cout) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int tiles_n = cout / 16;
  const int tp = warp / tiles_n, tc = warp % tiles_n;
  if (tp * 16 >= pixels) return;
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
  wmma::fill_fragment(acc, 0.f);
  for (int c = 0; c < cin; c += 8) {
    wmma::load_matrix_sync(fa, in + size_t(tp * 16) * cin + c, cin);
    wmma::load_matrix_sync(fb, w + size_t(tc * 16) * cin + c, cin);
#pragma unroll
    for (int e = 0; e < fa.num_elements; ++e) fa.x[e] = wmma::__float_to_tf32(fa.x[e]);
#pragma unroll
    for (int e = 0; e < fb.num_elements; ++e) fb.x[e] = wmma::__float_to_tf32(fb.x[e]);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(out + size_t(tp * 16) * cout + tc * 16, acc, cout, wmma::mem_row_major);
}
