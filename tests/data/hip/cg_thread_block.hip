// Cooperative groups, block level: this_thread_block(), thread_rank(), group sync, and device
// functions written against a thread_group (the HIP cooperative-groups sample style).
#include <hip/hip_runtime.h>
#include <hip/hip_cooperative_groups.h>

namespace cg = cooperative_groups;

// Reduction over any thread_group: the group size is only known at run time.
__device__ int reduce_sum(cg::thread_group g, int* scratch, int val) {
  const int lane = g.thread_rank();
  for (int i = g.size() / 2; i > 0; i /= 2) {
    scratch[lane] = val;
    g.sync();
    if (lane < i) val += scratch[lane + i];
    g.sync();
  }
  return val;  // thread 0 of the group has the sum
}

__global__ void block_sum_cg(const int* __restrict__ in, int* __restrict__ out, int n) {
  extern __shared__ int workspace[];
  cg::thread_block block = cg::this_thread_block();

  int my = 0;
  for (int i = block.group_index().x * block.size() + block.thread_rank(); i < n; i += gridDim.x * block.size())
    my += in[i];
  const int sum = reduce_sum(block, workspace, my);
  if (block.thread_rank() == 0) out[block.group_index().x] = sum;
}

// 2D block: thread_index()/group_index() instead of threadIdx/blockIdx.
__global__ void box_blur_cg(const float* __restrict__ src, float* __restrict__ dst, int w, int h) {
  cg::thread_block block = cg::this_thread_block();
  __shared__ float tile[18][18];
  const dim3 t = block.thread_index();
  const dim3 b = block.group_index();
  const dim3 d = blockDim;  // HIP 5.2 thread_block has no group_dim()/dim_threads()
  const int x = b.x * d.x + t.x;
  const int y = b.y * d.y + t.y;

  for (int ty = t.y; ty < 18; ty += d.y)
    for (int tx = t.x; tx < 18; tx += d.x) {
      const int gx = min(max(static_cast<int>(b.x * d.x) + tx - 1, 0), w - 1);
      const int gy = min(max(static_cast<int>(b.y * d.y) + ty - 1, 0), h - 1);
      tile[ty][tx] = src[gy * w + gx];
    }
  block.sync();
  if (x < w && y < h) {
    float s = 0.0f;
#pragma unroll
    for (int dy = 0; dy < 3; ++dy)
#pragma unroll
      for (int dx = 0; dx < 3; ++dx) s += tile[t.y + dy][t.x + dx];
    dst[y * w + x] = s * (1.0f / 9.0f);
  }
}

// cg::sync(group) free function and is_valid().
__global__ void prefix_flags_cg(const int* __restrict__ flags, int* __restrict__ offsets, int n) {
  cg::thread_block block = cg::this_thread_block();
  __shared__ int scan[1024];
  const unsigned int r = block.thread_rank();
  const unsigned int gid = block.group_index().x * block.size() + r;
  scan[r] = (gid < static_cast<unsigned int>(n) && block.is_valid()) ? flags[gid] : 0;
  cg::sync(block);
  for (unsigned int off = 1; off < block.size(); off <<= 1) {
    const int v = r >= off ? scan[r - off] : 0;
    cg::sync(block);
    scan[r] += v;
    cg::sync(block);
  }
  if (gid < static_cast<unsigned int>(n)) offsets[gid] = scan[r] - (gid < static_cast<unsigned int>(n) ? flags[gid] : 0);
}
