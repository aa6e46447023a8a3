// bfloat16 with <hip/hip_bfloat16.h> (HIP 5.2's hip_bfloat16 struct): float<->bf16 conversion
// (round-to-nearest-even and truncate), bf16 GEMV and layer scaling with float accumulation.
#include <hip/hip_runtime.h>
#include <hip/hip_bfloat16.h>

__global__ void f32_to_bf16(const float* __restrict__ in, hip_bfloat16* __restrict__ out_rne,
                            hip_bfloat16* __restrict__ out_trunc, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out_rne[i] = hip_bfloat16(in[i]);
  out_trunc[i] = hip_bfloat16(in[i], hip_bfloat16::truncate);
}

// y = A x, bf16 storage, f32 accumulation; one row per block, LDS tree reduction.
template <int BlockSize>
__global__ void bf16_gemv(const hip_bfloat16* __restrict__ A, const hip_bfloat16* __restrict__ x,
                          hip_bfloat16* __restrict__ y, int rows, int cols) {
  __shared__ float partial[BlockSize];
  const int row = blockIdx.x;
  if (row >= rows) return;
  float acc = 0.0f;
  for (int c = threadIdx.x; c < cols; c += BlockSize)
    acc += static_cast<float>(A[static_cast<size_t>(row) * cols + c]) * static_cast<float>(x[c]);
  partial[threadIdx.x] = acc;
  __syncthreads();
#pragma unroll
  for (int s = BlockSize / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) y[row] = hip_bfloat16(partial[0]);
}
template __global__ void bf16_gemv<128>(const hip_bfloat16*, const hip_bfloat16*, hip_bfloat16*, int, int);
template __global__ void bf16_gemv<256>(const hip_bfloat16*, const hip_bfloat16*, hip_bfloat16*, int, int);

// RMSNorm in bf16 with the struct's arithmetic operators (which round through float).
__global__ void bf16_rmsnorm(const hip_bfloat16* __restrict__ x, const hip_bfloat16* __restrict__ w,
                             hip_bfloat16* __restrict__ y, int cols, float eps) {
  __shared__ float red[256];
  const hip_bfloat16* row = x + static_cast<size_t>(blockIdx.x) * cols;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = static_cast<float>(row[c]);
    ss += v * v;
  }
  red[threadIdx.x] = ss;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) red[threadIdx.x] += red[threadIdx.x + s];
    __syncthreads();
  }
  const hip_bfloat16 scale(rsqrtf(red[0] / cols + eps));
  for (int c = threadIdx.x; c < cols; c += blockDim.x) y[static_cast<size_t>(blockIdx.x) * cols + c] = row[c] * scale * w[c];
}

__global__ void bf16_classify(const hip_bfloat16* __restrict__ v, int* __restrict__ cls, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const hip_bfloat16 b = v[i];
  cls[i] = isnan(b) ? 2 : (isinf(b) ? 1 : (b < hip_bfloat16(0.0f) ? -1 : 0));
}
