// Tensor cores through `nvcuda::wmma` with bf16 inputs (sm_80+): batched GEMM with strided batches and alpha/beta scaling.
#include <mma.h>
#include <cuda_bf16.h>
#include <type_traits>

using namespace nvcuda;

// One warp per 16x16 output tile of each batch; blockIdx.z is the batch index.
template <typename LayoutA, typename LayoutB>
__global__ void bgemm_bf16(const __nv_bfloat16* __restrict__ A, const __nv_bfloat16* __restrict__ B, float* __restrict__ C,
                           int M, int N, int K, long long strideA, long long strideB, long long strideC, float alpha,
                           float beta) {
  const int warps_per_block = blockDim.x / 32;
  const int tile = blockIdx.x * warps_per_block + threadIdx.x / 32;
  const int tiles_n = N / 16;
  const int tm = tile / tiles_n, tn = tile % tiles_n;
  if (tm * 16 >= M) return;
  const __nv_bfloat16* a = A + blockIdx.z * strideA;
  const __nv_bfloat16* b = B + blockIdx.z * strideB;
  float* c = C + blockIdx.z * strideC;
  constexpr bool a_row = std::is_same<LayoutA, wmma::row_major>::value;
  constexpr bool b_row = std::is_same<LayoutB, wmma::row_major>::value;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc, old;
  wmma::fill_fragment(acc, 0.f);
  for (int k = 0; k < K; k += 16) {
    const __nv_bfloat16* pa = a_row ? a + size_t(tm * 16) * K + k : a + size_t(k) * M + tm * 16;
    const __nv_bfloat16* pb = b_row ? b + size_t(k) * N + tn * 16 : b + size_t(tn * 16) * K + k;
    wmma::load_matrix_sync(fa, pa, a_row ? K : M);
    wmma::load_matrix_sync(fb, pb, b_row ? N : K);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  float* pc = c + size_t(tm * 16) * N + tn * 16;
  if (beta != 0.f) {
    wmma::load_matrix_sync(old, pc, N, wmma::mem_row_major);
#pragma unroll
    for (int e = 0; e < acc.num_elements; ++e) acc.x[e] = alpha * acc.x[e] + beta * old.x[e];
  } else {
#pragma unroll
    for (int e = 0; e < acc.num_elements; ++e) acc.x[e] *= alpha;
  }
  wmma::store_matrix_sync(pc, acc, N, wmma::mem_row_major);
}

template __global__ void bgemm_bf16<wmma::row_major, wmma::row_major>(const __nv_bfloat16*, const __nv_bfloat16*, float*, int, int, int, long long, long long, long long, float, float);
template __global__ void bgemm_bf16<wmma::row_major, wmma::col_major>(const __nv_bfloat16*, const __nv_bfloat16*, float*, int, int, int, long long, long long, long long, float, float);
template __global__ void bgemm_bf16<wmma::col_major, wmma::row_major>(const __nv_bfloat16*, const __nv_bfloat16*, float*, int, int, int, long long, long long, long long, float, float);
template __global__ void bgemm_bf16<wmma::col_major, wmma::col_major>(const __nv_bfloat16*, const __nv_bfloat16*, float*, int, int, int, long long, long long, long long, float, float);

// bf16 attention scores: S = Q K^T * scale for one 16-row query tile, written back as bf16.
__global__ void qk_scores_bf16(const __nv_bfloat16* __restrict__ Q, const __nv_bfloat16* __restrict__ Kt,
                               __nv_bfloat16* __restrict__ S, int seq, int dim, float scale) {
  __shared__ __align__(32) float tile[4][256];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = blockIdx.y * 16, k0 = (blockIdx.x * 4 + warp) * 16;
  if (k0 >= seq) return;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fq;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fk;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.f);
  for (int d = 0; d < dim; d += 16) {
    wmma::load_matrix_sync(fq, Q + size_t(q0) * dim + d, dim);
    wmma::load_matrix_sync(fk, Kt + size_t(k0) * dim + d, dim);
    wmma::mma_sync(acc, fq, fk, acc);
  }
  wmma::store_matrix_sync(tile[warp], acc, 16, wmma::mem_row_major);
  __syncwarp();
  for (int e = lane; e < 256; e += 32)
    S[size_t(q0 + e / 16) * seq + k0 + e % 16] = __float2bfloat16_rn(tile[warp][e] * scale);
}
