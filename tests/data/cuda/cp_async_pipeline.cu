// `cp.async` through cuda_pipeline.h primitives (`__pipeline_memcpy_async`, `__pipeline_commit`, `__pipeline_wait_prior`) in a multi-stage stencil/reduction.
#include <cuda_pipeline.h>

// A 3-stage producer/consumer loop over tiles of a long 1D signal: tile t+2 is in flight while tile t
// is being filtered (moving average of width 2R+1).
template <int kBlock, int kStages, int R>
__global__ void __launch_bounds__(kBlock) moving_average_pipelined(const float* __restrict__ in, float* __restrict__ out,
                                                                   int n_tiles) {
  __shared__ __align__(16) float stage[kStages][kBlock + 2 * R];
  const int tile0 = blockIdx.x * n_tiles;
  auto issue = [&](int t) {
    const int s = t % kStages;
    const float* src = in + size_t(tile0 + t) * kBlock;  // the input is padded by R on both sides
    __pipeline_memcpy_async(&stage[s][threadIdx.x], src + threadIdx.x, sizeof(float));
    if (threadIdx.x < 2 * R) __pipeline_memcpy_async(&stage[s][kBlock + threadIdx.x], src + kBlock + threadIdx.x, sizeof(float));
  };
#pragma unroll
  for (int t = 0; t < kStages - 1; ++t) {
    if (t < n_tiles) issue(t);
    __pipeline_commit();
  }
  for (int t = 0; t < n_tiles; ++t) {
    if (t + kStages - 1 < n_tiles) issue(t + kStages - 1);
    __pipeline_commit();
    __pipeline_wait_prior(kStages - 1);
    __syncthreads();
    const float* s = stage[t % kStages];
    float acc = 0.f;
#pragma unroll
    for (int j = 0; j <= 2 * R; ++j) acc += s[threadIdx.x + j];
    out[size_t(tile0 + t) * kBlock + threadIdx.x] = acc * (1.f / (2 * R + 1));
    __syncthreads();
  }
}

template __global__ void moving_average_pipelined<128, 3, 4>(const float*, float*, int);
template __global__ void moving_average_pipelined<256, 2, 8>(const float*, float*, int);
template __global__ void moving_average_pipelined<256, 4, 2>(const float*, float*, int);

// 16-byte cp.async (the .cg form) of float4 rows, double-buffered, with a column-sum reduction.
__global__ void column_sums_f4(const float4* __restrict__ rows, int n_rows, int row_len4, float4* __restrict__ sums) {
  extern __shared__ __align__(16) float4 buf[];  // 2 * blockDim.x float4
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const bool active = col < row_len4;
  if (active) __pipeline_memcpy_async(&buf[threadIdx.x], &rows[col], sizeof(float4));
  __pipeline_commit();
  for (int r = 0; r < n_rows; ++r) {
    const int cur = r & 1;
    if (active && r + 1 < n_rows)
      __pipeline_memcpy_async(&buf[(cur ^ 1) * blockDim.x + threadIdx.x], &rows[size_t(r + 1) * row_len4 + col], sizeof(float4));
    __pipeline_commit();
    __pipeline_wait_prior(1);
    if (active) {
      const float4 v = buf[cur * blockDim.x + threadIdx.x];
      acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
  }
  __pipeline_wait_prior(0);
  if (active) sums[col] = acc;
}

// 8-byte copies with zero-fill of the tail (src_size < size) through __pipeline_memcpy_async's zfill argument.
__global__ void padded_copy_d(const double* __restrict__ in, int n, double* __restrict__ out) {
  __shared__ __align__(8) double s[256];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const bool in_range = i < n;
  __pipeline_memcpy_async(&s[threadIdx.x], in + (in_range ? i : 0), sizeof(double), in_range ? 0 : sizeof(double));
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  out[i] = s[threadIdx.x] + s[(threadIdx.x + 1) % blockDim.x];
}
