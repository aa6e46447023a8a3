// `__launch_bounds__` with one and two arguments (maxThreadsPerBlock, minBlocksPerMultiprocessor) on register-hungry kernels, instantiated for several occupancy targets.
#include <cuda_runtime.h>

// Register-blocked SGEMM micro-kernel (8x8 outputs per thread) whose register use the bounds must cap.
template <int kThreads, int kMinBlocks>
__global__ void __launch_bounds__(kThreads, kMinBlocks) sgemm_8x8(const float* __restrict__ A, const float* __restrict__ B,
                                                                float* __restrict__ C, int M, int N, int K) {
  constexpr int TM = 8, TN = 8;
  const int tiles_n = N / TN;
  const int t = blockIdx.x * kThreads + threadIdx.x;
  const int tm = (t / tiles_n) * TM, tn = (t % tiles_n) * TN;
  if (tm >= M) return;
  float acc[TM][TN] = {};
  for (int k = 0; k < K; ++k) {
    float a[TM], b[TN];
#pragma unroll
    for (int i = 0; i < TM; ++i) a[i] = A[size_t(tm + i) * K + k];
#pragma unroll
    for (int j = 0; j < TN; ++j) b[j] = B[size_t(k) * N + tn + j];
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
  }
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) C[size_t(tm + i) * N + tn + j] = acc[i][j];
}

template __global__ void sgemm_8x8<64, 8>(const float*, const float*, float*, int, int, int);
template __global__ void sgemm_8x8<128, 4>(const float*, const float*, float*, int, int, int);
template __global__ void sgemm_8x8<256, 2>(const float*, const float*, float*, int, int, int);
template __global__ void sgemm_8x8<256, 1>(const float*, const float*, float*, int, int, int);
template __global__ void sgemm_8x8<1024, 1>(const float*, const float*, float*, int, int, int);

// One-argument form: cap the block size only.
__global__ void __launch_bounds__(512) nbody_forces(const float4* __restrict__ pos, float3* __restrict__ acc, int n, float soft2) {
  extern __shared__ float4 tile[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const float4 pi = i < n ? pos[i] : make_float4(0.f, 0.f, 0.f, 0.f);
  float3 a = make_float3(0.f, 0.f, 0.f);
  for (int base = 0; base < n; base += blockDim.x) {
    const int j0 = base + static_cast<int>(threadIdx.x);
    tile[threadIdx.x] = j0 < n ? pos[j0] : make_float4(0.f, 0.f, 0.f, 0.f);
    __syncthreads();
#pragma unroll 8
    for (int j = 0; j < static_cast<int>(blockDim.x); ++j) {
      const float4 pj = tile[j];
      const float dx = pj.x - pi.x, dy = pj.y - pi.y, dz = pj.z - pi.z;
      const float inv = rsqrtf(dx * dx + dy * dy + dz * dz + soft2);
      const float s = pj.w * inv * inv * inv;
      a.x += dx * s;
      a.y += dy * s;
      a.z += dz * s;
    }
    __syncthreads();
  }
  if (i < n) acc[i] = a;
}

// Two-argument form on a double-precision kernel with a large live set (16 accumulators of FP64).
__global__ void __launch_bounds__(128, 3) poly_eval_d(const double* __restrict__ x, const double* __restrict__ coeffs, double* __restrict__ y,
                                                     int n, int degree) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double xs[16], acc[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) {
    xs[k] = x[(size_t(i) * 16 + k) % n];
    acc[k] = 0.0;
  }
  for (int d = degree; d >= 0; --d) {
    const double c = coeffs[d];
#pragma unroll
    for (int k = 0; k < 16; ++k) acc[k] = fma(acc[k], xs[k], c);
  }
  double s = 0.0;
#pragma unroll
  for (int k = 0; k < 16; ++k) s += acc[k];
  y[i] = s;
}
