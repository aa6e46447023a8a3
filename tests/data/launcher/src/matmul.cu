#include "launcher/kernels.hpp"

namespace {
template <int Tile>
__global__ void matmul_kernel(const float* a, const float* b, float* c, int n) {
  __shared__ float as[Tile][Tile], bs[Tile][Tile];
  int row = blockIdx.y * Tile + threadIdx.y, col = blockIdx.x * Tile + threadIdx.x;
  float acc = 0;
  for (int t = 0; t < (n + Tile - 1) / Tile; ++t) {
    as[threadIdx.y][threadIdx.x] = row < n && t * Tile + threadIdx.x < n ? a[row * n + t * Tile + threadIdx.x] : 0.f;
    bs[threadIdx.y][threadIdx.x] = col < n && t * Tile + threadIdx.y < n ? b[(t * Tile + threadIdx.y) * n + col] : 0.f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < Tile; ++k) acc += as[threadIdx.y][k] * bs[k][threadIdx.x];
    __syncthreads();
  }
  if (row < n && col < n) c[row * n + col] = acc;
}
}  // namespace

void fixture::matmul(const float* a, const float* b, float* c, int n) {
  dim3 block(16, 16), grid((n + 15) / 16, (n + 15) / 16);
  matmul_kernel<16><<<grid, block>>>(a, b, c, n);
}
