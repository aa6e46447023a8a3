// Element-wise and dense linear-algebra kernels, several to a file as projects keep them.
#include "launcher/common.cuh"
#include "launcher/kernels.hpp"

// saxpy
namespace {
__global__ void saxpy_kernel(float a, const float* x, float* y, std::size_t n) {
  fixture::grid_stride(n, [=] __device__(std::size_t i) { y[i] = a * x[i] + y[i]; });
}
}  // namespace

void fixture::saxpy(float a, const float* x, float* y, std::size_t n) {
  saxpy_kernel<<<blocks_for(n), k_block>>>(a, x, y, n);
}

// stencil
namespace {
__constant__ float k_weights[5] = {0.1f, 0.2f, 0.4f, 0.2f, 0.1f};

__global__ void stencil_kernel(const float* in, float* out, std::size_t n) {
  fixture::grid_stride(n, [=] __device__(std::size_t i) {
    float acc = 0;
    for (int k = -2; k <= 2; ++k) {
      long j = static_cast<long>(i) + k;
      if (j >= 0 && j < static_cast<long>(n)) acc += k_weights[k + 2] * in[j];
    }
    out[i] = acc;
  });
}
}  // namespace

void fixture::stencil(const float* in, float* out, std::size_t n) {
  stencil_kernel<<<blocks_for(n), k_block>>>(in, out, n);
}

// transpose
namespace {
constexpr int k_tile = 32;
__global__ void transpose_kernel(const float* in, float* out, int rows, int cols) {
  __shared__ float tile[k_tile][k_tile + 1];
  int x = blockIdx.x * k_tile + threadIdx.x, y = blockIdx.y * k_tile + threadIdx.y;
  if (x < cols && y < rows) tile[threadIdx.y][threadIdx.x] = in[y * cols + x];
  __syncthreads();
  x = blockIdx.y * k_tile + threadIdx.x;
  y = blockIdx.x * k_tile + threadIdx.y;
  if (x < rows && y < cols) out[y * rows + x] = tile[threadIdx.x][threadIdx.y];
}
}  // namespace

void fixture::transpose(const float* in, float* out, int rows, int cols) {
  dim3 grid((cols + k_tile - 1) / k_tile, (rows + k_tile - 1) / k_tile), block(k_tile, k_tile);
  transpose_kernel<<<grid, block>>>(in, out, rows, cols);
}

// matmul
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
