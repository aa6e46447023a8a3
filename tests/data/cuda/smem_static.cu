// Static `__shared__` arrays (2D, padded, per-template-size) in a tiled SGEMM and a block softmax.
#include <cuda_runtime.h>
#include <cfloat>

template <int kTile>
__global__ void sgemm_tiled(int m, int n, int k, float alpha, const float* __restrict__ a, int lda,
                            const float* __restrict__ b, int ldb, float beta, float* __restrict__ c, int ldc) {
  __shared__ float sa[kTile][kTile + 1];
  __shared__ float sb[kTile][kTile + 1];
  const int row = blockIdx.y * kTile + threadIdx.y;
  const int col = blockIdx.x * kTile + threadIdx.x;
  float acc = 0.f;
  for (int t = 0; t < k; t += kTile) {
    const int ka = t + static_cast<int>(threadIdx.x), kb = t + static_cast<int>(threadIdx.y);
    sa[threadIdx.y][threadIdx.x] = (row < m && ka < k) ? a[row * lda + ka] : 0.f;
    sb[threadIdx.y][threadIdx.x] = (col < n && kb < k) ? b[kb * ldb + col] : 0.f;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTile; ++i) acc = fmaf(sa[threadIdx.y][i], sb[i][threadIdx.x], acc);
    __syncthreads();
  }
  if (row < m && col < n) c[row * ldc + col] = alpha * acc + beta * c[row * ldc + col];
}

template __global__ void sgemm_tiled<8>(int, int, int, float, const float*, int, const float*, int, float, float*, int);
template __global__ void sgemm_tiled<16>(int, int, int, float, const float*, int, const float*, int, float, float*, int);
template __global__ void sgemm_tiled<32>(int, int, int, float, const float*, int, const float*, int, float, float*, int);

// Row softmax: one block per row, static shared scratch for the max and sum reductions.
__global__ void __launch_bounds__(256) softmax_rows(const float* __restrict__ x, float* __restrict__ y, int cols) {
  __shared__ float red[256];
  __shared__ float row_max, row_sum;
  const float* xr = x + static_cast<size_t>(blockIdx.x) * cols;
  float* yr = y + static_cast<size_t>(blockIdx.x) * cols;
  float m = -FLT_MAX;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) m = fmaxf(m, xr[i]);
  red[threadIdx.x] = m;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
    __syncthreads();
  }
  if (threadIdx.x == 0) row_max = red[0];
  __syncthreads();
  float sum = 0.f;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) sum += __expf(xr[i] - row_max);
  red[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) row_sum = red[0];
  __syncthreads();
  const float inv = 1.f / row_sum;
  for (int i = threadIdx.x; i < cols; i += blockDim.x) yr[i] = __expf(xr[i] - row_max) * inv;
}
