// Dynamic shared memory declared as `extern __shared__ __align__(16) float4[]`: a vectorised 2D 5-point stencil with a halo tile.
#include <cuda_runtime.h>

namespace stencil {

struct Coeffs {
  float center, north, south, east, west;
};

// Each block loads a (blockDim.y + 2) x (blockDim.x + 2) tile of float4 (4 consecutive columns per
// element) into dynamic shared memory, then applies the stencil to every lane of the float4.
__global__ void stencil5_f4(const float4* __restrict__ in, float4* __restrict__ out, int width4, int height,
                            Coeffs c) {
  extern __shared__ __align__(16) float4 tile[];
  const int pitch = blockDim.x + 2;
  const int gx = blockIdx.x * blockDim.x + threadIdx.x;
  const int gy = blockIdx.y * blockDim.y + threadIdx.y;
  const int lx = threadIdx.x + 1;
  const int ly = threadIdx.y + 1;

  auto load = [&](int x, int y) -> float4 {
    x = min(max(x, 0), width4 - 1);
    y = min(max(y, 0), height - 1);
    return in[static_cast<size_t>(y) * width4 + x];
  };

  tile[ly * pitch + lx] = load(gx, gy);
  if (threadIdx.x == 0) tile[ly * pitch] = load(gx - 1, gy);
  if (threadIdx.x == blockDim.x - 1) tile[ly * pitch + lx + 1] = load(gx + 1, gy);
  if (threadIdx.y == 0) tile[lx] = load(gx, gy - 1);
  if (threadIdx.y == blockDim.y - 1) tile[(ly + 1) * pitch + lx] = load(gx, gy + 1);
  __syncthreads();

  if (gx >= width4 || gy >= height) return;
  const float4 m = tile[ly * pitch + lx];
  const float4 n = tile[(ly - 1) * pitch + lx];
  const float4 s = tile[(ly + 1) * pitch + lx];
  const float4 e = tile[ly * pitch + lx + 1];
  const float4 w = tile[ly * pitch + lx - 1];
  float4 r;
  // Within a float4 the x/y/z/w lanes are neighbours along the row.
  r.x = c.center * m.x + c.north * n.x + c.south * s.x + c.west * w.w + c.east * m.y;
  r.y = c.center * m.y + c.north * n.y + c.south * s.y + c.west * m.x + c.east * m.z;
  r.z = c.center * m.z + c.north * n.z + c.south * s.z + c.west * m.y + c.east * m.w;
  r.w = c.center * m.w + c.north * n.w + c.south * s.w + c.west * m.z + c.east * e.x;
  out[static_cast<size_t>(gy) * width4 + gx] = r;
}

// A tiled transpose through dynamic shared memory of float4 (padding avoids bank conflicts).
__global__ void transpose_f4(const float4* __restrict__ in, float4* __restrict__ out, int rows, int cols) {
  extern __shared__ __align__(16) float4 buf[];
  const int tile = blockDim.x;
  const int x = blockIdx.x * tile + threadIdx.x;
  for (int j = threadIdx.y; j < tile; j += blockDim.y) {
    const int y = blockIdx.y * tile + j;
    if (x < cols && y < rows) buf[j * (tile + 1) + threadIdx.x] = in[static_cast<size_t>(y) * cols + x];
  }
  __syncthreads();
  const int tx = blockIdx.y * tile + threadIdx.x;
  for (int j = threadIdx.y; j < tile; j += blockDim.y) {
    const int ty = blockIdx.x * tile + j;
    if (tx < rows && ty < cols) out[static_cast<size_t>(ty) * rows + tx] = buf[threadIdx.x * (tile + 1) + j];
  }
}

}  // namespace stencil
