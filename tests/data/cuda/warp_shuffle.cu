// Warp shuffles: `__shfl_sync` broadcast, `__shfl_xor_sync` butterfly, `__shfl_up_sync` scan, `__shfl_down_sync` reduce, sub-warp widths.
#include <cuda_runtime.h>
#include <cuda_fp16.h>

constexpr unsigned kFull = 0xffffffffu;

template <typename T>
__device__ __forceinline__ T warp_inclusive_scan(T v, int width = 32) {
  const int lane = threadIdx.x & (width - 1);
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    if (off >= width) break;
    T up = __shfl_up_sync(kFull, v, off, width);
    if (lane >= off) v += up;
  }
  return v;
}

template <typename T>
__device__ __forceinline__ T warp_allreduce_xor(T v) {
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) v += __shfl_xor_sync(kFull, v, mask);
  return v;
}

// Segmented scan across a block: warp scans with shfl_up, warp totals combined through shared memory.
__global__ void block_exclusive_scan(const int* __restrict__ in, int* __restrict__ out, int* __restrict__ block_sums,
                                     int n) {
  __shared__ int warp_tot[32];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int x = i < n ? in[i] : 0;
  int incl = warp_inclusive_scan(x);
  if (lane == 31) warp_tot[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    const int nw = blockDim.x >> 5;
    int t = lane < nw ? warp_tot[lane] : 0;
    t = warp_inclusive_scan(t);
    if (lane < nw) warp_tot[lane] = t;
  }
  __syncthreads();
  const int base = warp > 0 ? warp_tot[warp - 1] : 0;
  if (i < n) out[i] = base + incl - x;
  if (threadIdx.x == blockDim.x - 1) block_sums[blockIdx.x] = base + incl;
}

// Per-row L2 normalisation, one warp per row, butterfly all-reduce so every lane has the norm.
__global__ void rownorm_warp(const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const float* xr = x + static_cast<size_t>(row) * cols;
  float ss = 0.f;
  for (int c = lane; c < cols; c += 32) ss = fmaf(xr[c], xr[c], ss);
  ss = warp_allreduce_xor(ss);
  const float inv = rsqrtf(ss + 1e-12f);
  for (int c = lane; c < cols; c += 32) y[static_cast<size_t>(row) * cols + c] = xr[c] * inv;
}

// Register-blocked 8x8 transpose inside groups of 8 lanes with __shfl_sync(width=8), then a
// broadcast of lane 0's value (e.g. a pivot) with __shfl_sync.
__global__ void shuffle_transpose8(const double* __restrict__ in, double* __restrict__ out) {
  const int lane8 = threadIdx.x & 7;
  const size_t base = (static_cast<size_t>(blockIdx.x) * blockDim.x + (threadIdx.x & ~7)) * 8;
  double r[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) r[j] = in[base + lane8 * 8 + j];
  double t[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    // Rotation transpose: in step j lane L reads lane (L + j) % 8, which sends its register
    // (sender - j) % 8, i.e. element (row L + j, column L).
    const int src = (lane8 + j) & 7;
    double send = r[0];
#pragma unroll
    for (int q = 0; q < 8; ++q)
      if (q == ((lane8 - j + 8) & 7)) send = r[q];
    t[src] = __shfl_sync(kFull, send, (threadIdx.x & ~7) | src, 32);
  }
  const double pivot = __shfl_sync(kFull, t[0], 0);
#pragma unroll
  for (int j = 0; j < 8; ++j) out[base + lane8 * 8 + j] = t[j] - pivot;
}

// Half2 dot products reduced with shfl_down; lane 0 of each warp writes.
__global__ void dot_half2(const __half2* __restrict__ a, const __half2* __restrict__ b, float* __restrict__ out, int n2) {
  float acc = 0.f;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n2; i += gridDim.x * blockDim.x) {
    const float2 p = __half22float2(__hmul2(a[i], b[i]));
    acc += p.x + p.y;
  }
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) acc += __shfl_down_sync(kFull, acc, off);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, acc);
}
