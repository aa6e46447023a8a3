#include "launcher/kernels.hpp"

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
