// Shared memory both ways: a static __shared__ tile (matrix transpose with the +1 padding that
// avoids bank conflicts) and dynamic shared memory sized at launch (HIP_DYNAMIC_SHARED and a bare
// extern __shared__ array), as in hipified CUDA samples and stencil codes.
#include "hip_minimal.h"

constexpr int k_tile = 32;
constexpr int k_rows = 8;

template <typename T>
__global__ void transpose(T* __restrict__ out, const T* __restrict__ in, int width, int height) {
  __shared__ T tile[k_tile][k_tile + 1];
  int x = blockIdx.x * k_tile + threadIdx.x;
  int y = blockIdx.y * k_tile + threadIdx.y;
  for (int j = 0; j < k_tile; j += k_rows) {
    if (x < width && y + j < height) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * width + x];
  }
  __syncthreads();
  x = blockIdx.y * k_tile + threadIdx.x;
  y = blockIdx.x * k_tile + threadIdx.y;
  for (int j = 0; j < k_tile; j += k_rows) {
    if (x < height && y + j < width) out[(y + j) * height + x] = tile[threadIdx.x][threadIdx.y + j];
  }
}

template __global__ void transpose<float>(float*, const float*, int, int);
template __global__ void transpose<double>(double*, const double*, int, int);

// 1D stencil: each block stages blockDim.x + 2 * radius elements in dynamic shared memory.
template <int Radius>
__global__ void stencil_1d(const float* __restrict__ in, float* __restrict__ out, int n) {
  HIP_DYNAMIC_SHARED(float, halo)
  int g = blockIdx.x * blockDim.x + threadIdx.x;
  int l = threadIdx.x + Radius;
  halo[l] = g < n ? in[g] : 0.0f;
  if (threadIdx.x < Radius) {
    int left = g - Radius;
    int right = g + blockDim.x;
    halo[l - Radius] = left >= 0 ? in[left] : 0.0f;
    halo[l + blockDim.x] = right < n ? in[right] : 0.0f;
  }
  __syncthreads();
  if (g >= n) return;
  float sum = 0.0f;
#pragma unroll
  for (int k = -Radius; k <= Radius; ++k) sum += halo[l + k];
  out[g] = sum / (2 * Radius + 1);
}

template __global__ void stencil_1d<3>(const float*, float*, int);

// Inclusive block scan (Hillis-Steele) over a dynamic buffer of two halves (double buffering).
extern __shared__ int scan_buffer[];

extern "C" __global__ void block_inclusive_scan(const int* __restrict__ in, int* __restrict__ out, int n) {
  int tid = threadIdx.x;
  int g = blockIdx.x * blockDim.x + tid;
  int* ping = scan_buffer;
  int* pong = scan_buffer + blockDim.x;
  ping[tid] = g < n ? in[g] : 0;
  __syncthreads();
  for (unsigned offset = 1; offset < blockDim.x; offset *= 2) {
    pong[tid] = tid >= (int)offset ? ping[tid] + ping[tid - offset] : ping[tid];
    __syncthreads();
    int* swap = ping;
    ping = pong;
    pong = swap;
  }
  if (g < n) out[g] = ping[tid];
}
