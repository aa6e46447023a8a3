// Static __shared__ memory: padded transpose tile (HIP-Examples/transpose), tiled SGEMM with two
// static 2D tiles, and a 1D stencil with a halo.
#include <hip/hip_runtime.h>

#define TILE_DIM 32
#define BLOCK_ROWS 8
#define RADIUS 3

__global__ void transpose_lds(float* __restrict__ out, const float* __restrict__ in, int width, int height) {
  // +1 column avoids LDS bank conflicts on the column read.
  __shared__ float tile[TILE_DIM][TILE_DIM + 1];

  int x = blockIdx.x * TILE_DIM + threadIdx.x;
  int y = blockIdx.y * TILE_DIM + threadIdx.y;
  for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
    if (x < width && (y + j) < height) tile[threadIdx.y + j][threadIdx.x] = in[(y + j) * width + x];

  __syncthreads();

  x = blockIdx.y * TILE_DIM + threadIdx.x;
  y = blockIdx.x * TILE_DIM + threadIdx.y;
  for (int j = 0; j < TILE_DIM; j += BLOCK_ROWS)
    if (x < height && (y + j) < width) out[(y + j) * height + x] = tile[threadIdx.x][threadIdx.y + j];
}

template <int BS>
__global__ void sgemm_tiled(const float* __restrict__ A, const float* __restrict__ B, float* __restrict__ C,
                            int M, int N, int K, float alpha, float beta) {
  __shared__ float As[BS][BS];
  __shared__ float Bs[BS][BS + 1];

  const int row = blockIdx.y * BS + threadIdx.y;
  const int col = blockIdx.x * BS + threadIdx.x;
  float acc = 0.0f;

  for (int t = 0; t < (K + BS - 1) / BS; ++t) {
    const int ak = t * BS + threadIdx.x;
    const int bk = t * BS + threadIdx.y;
    As[threadIdx.y][threadIdx.x] = (row < M && ak < K) ? A[row * K + ak] : 0.0f;
    Bs[threadIdx.y][threadIdx.x] = (bk < K && col < N) ? B[bk * N + col] : 0.0f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BS; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = alpha * acc + beta * C[row * N + col];
}

template __global__ void sgemm_tiled<16>(const float*, const float*, float*, int, int, int, float, float);
template __global__ void sgemm_tiled<32>(const float*, const float*, float*, int, int, int, float, float);

__global__ void stencil_1d(const int* __restrict__ in, int* __restrict__ out, int n) {
  __shared__ int temp[256 + 2 * RADIUS];
  const int gindex = threadIdx.x + blockIdx.x * blockDim.x;
  const int lindex = threadIdx.x + RADIUS;

  temp[lindex] = gindex < n ? in[gindex] : 0;
  if (threadIdx.x < RADIUS) {
    temp[lindex - RADIUS] = gindex >= RADIUS ? in[gindex - RADIUS] : 0;
    temp[lindex + blockDim.x] = (gindex + blockDim.x) < n ? in[gindex + blockDim.x] : 0;
  }
  __syncthreads();

  int result = 0;
#pragma unroll
  for (int offset = -RADIUS; offset <= RADIUS; ++offset) result += temp[lindex + offset];
  if (gindex < n) out[gindex] = result;
}
