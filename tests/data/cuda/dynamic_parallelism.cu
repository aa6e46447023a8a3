// Dynamic parallelism (CDP2): kernels launching kernels with `<<<>>>` from the device, fire-and-forget and tail launches, recursive refinement; needs rdc and libcudadevrt.
#include <cuda_runtime.h>

// Mariani-Silver Mandelbrot: a block checks the border of its rectangle; if the dwell is uniform it
// fills the rectangle, otherwise it launches a child grid that subdivides the rectangle.
__device__ int dwell(int w, int h, float2 cmin, float2 cmax, int x, int y, int max_dwell) {
  const float cx = cmin.x + (cmax.x - cmin.x) * x / w;
  const float cy = cmin.y + (cmax.y - cmin.y) * y / h;
  float zx = cx, zy = cy;
  int d = 0;
  while (d < max_dwell && zx * zx + zy * zy < 4.f) {
    const float t = zx * zx - zy * zy + cx;
    zy = 2.f * zx * zy + cy;
    zx = t;
    ++d;
  }
  return d;
}

__global__ void fill_rect(int* dwells, int w, int x0, int y0, int d, int rect) {
  const int x = threadIdx.x + blockIdx.x * blockDim.x, y = threadIdx.y + blockIdx.y * blockDim.y;
  if (x < rect && y < rect) dwells[(y0 + y) * w + x0 + x] = d;
}

__global__ void per_pixel(int* dwells, int w, int h, float2 cmin, float2 cmax, int x0, int y0, int rect, int max_dwell) {
  const int x = threadIdx.x + blockIdx.x * blockDim.x, y = threadIdx.y + blockIdx.y * blockDim.y;
  if (x < rect && y < rect) dwells[(y0 + y) * w + x0 + x] = dwell(w, h, cmin, cmax, x0 + x, y0 + y, max_dwell);
}

__global__ void mariani_silver(int* dwells, int w, int h, float2 cmin, float2 cmax, int x0, int y0, int rect, int depth,
                               int max_dwell) {
  __shared__ int common;
  x0 += rect * blockIdx.x;
  y0 += rect * blockIdx.y;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  if (tid == 0) common = -1;
  __syncthreads();
  // Sample the border; any disagreement marks the rectangle as non-uniform (-2).
  for (int r = tid; r < rect; r += blockDim.x * blockDim.y) {
    for (int b = 0; b < 4; ++b) {
      const int x = b < 2 ? x0 + r : (b == 2 ? x0 : x0 + rect - 1);
      const int y = b < 2 ? (b == 0 ? y0 : y0 + rect - 1) : y0 + r;
      const int d = dwell(w, h, cmin, cmax, x, y, max_dwell);
      const int old = atomicCAS(&common, -1, d);
      if (old != -1 && old != d) atomicExch(&common, -2);
    }
  }
  __syncthreads();
  if (tid != 0) return;
  const dim3 bs(16, 16), gs((rect + 15) / 16, (rect + 15) / 16);
  if (common >= 0) {
    fill_rect<<<gs, bs, 0, cudaStreamFireAndForget>>>(dwells, w, x0, y0, common, rect);
  } else if (depth + 1 < 4 && rect / 4 >= 16) {
    mariani_silver<<<dim3(4, 4), blockDim>>>(dwells, w, h, cmin, cmax, x0, y0, rect / 4, depth + 1, max_dwell);
  } else {
    per_pixel<<<gs, bs>>>(dwells, w, h, cmin, cmax, x0, y0, rect, max_dwell);
  }
}

// A work-list driver: each round processes the current frontier and tail-launches itself for the
// next round (CDP2's replacement for cudaDeviceSynchronize on the device).
__global__ void expand_frontier(const int* row_ptr, const int* cols, int* levels, const int* frontier, int frontier_size,
                                int* next_frontier, int* next_size, int level) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= frontier_size) return;
  const int v = frontier[i];
  for (int j = row_ptr[v]; j < row_ptr[v + 1]; ++j) {
    const int u = cols[j];
    if (atomicCAS(&levels[u], -1, level + 1) == -1) next_frontier[atomicAdd(next_size, 1)] = u;
  }
}

__global__ void bfs_driver(const int* row_ptr, const int* cols, int* levels, int* bufs, int* sizes, int level, int max_levels) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const int cur = level & 1;
  const int n = sizes[cur];
  if (n == 0 || level >= max_levels) return;
  sizes[cur ^ 1] = 0;
  int* frontier = bufs + cur * (1 << 20);
  int* next = bufs + (cur ^ 1) * (1 << 20);
  expand_frontier<<<(n + 255) / 256, 256>>>(row_ptr, cols, levels, frontier, n, next, &sizes[cur ^ 1], level);
  // Runs after expand_frontier (and everything this grid launched) completes.
  bfs_driver<<<1, 32, 0, cudaStreamTailLaunch>>>(row_ptr, cols, levels, bufs, sizes, level + 1, max_levels);
  if (cudaGetLastError() != cudaSuccess) levels[0] = -2;
}

// A device-created stream for independent children.
__global__ void launch_on_stream(float* data, int n) {
  if (threadIdx.x != 0) return;
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return;
  fill_rect<<<1, dim3(8, 8), 0, s>>>(reinterpret_cast<int*>(data), n, 0, 0, 1, 8);
  cudaStreamDestroy(s);
}
