// Grid-wide cooperative groups: this_grid().sync() in a persistent kernel (HIP's __ockl_grid_sync),
// launched from host code with hipLaunchCooperativeKernel, and grid.thread_rank()/size().
#include <hip/hip_runtime.h>
#include <hip/hip_cooperative_groups.h>

namespace cg = cooperative_groups;

// Jacobi iterations on a 1D rod: every sweep needs the whole previous sweep, so the grid syncs.
__global__ void jacobi_persistent(float* __restrict__ u, float* __restrict__ v, int n, int iters) {
  cg::grid_group grid = cg::this_grid();
  for (int it = 0; it < iters; ++it) {
    for (unsigned long long i = grid.thread_rank(); i < static_cast<unsigned long long>(n); i += grid.size()) {
      const int k = static_cast<int>(i);
      const float l = k > 0 ? u[k - 1] : 0.0f;
      const float r = k < n - 1 ? u[k + 1] : 0.0f;
      v[k] = 0.5f * (l + r);
    }
    grid.sync();
    float* t = u;
    u = v;
    v = t;
  }
}

// Two-phase reduction inside one launch: block partials, grid sync, block 0 finishes.
__global__ void reduce_grid_sync(const float* __restrict__ in, float* __restrict__ partial, float* __restrict__ out,
                                 int n) {
  cg::grid_group grid = cg::this_grid();
  cg::thread_block block = cg::this_thread_block();
  __shared__ float red[256];
  float s = 0.0f;
  for (unsigned long long i = grid.thread_rank(); i < static_cast<unsigned long long>(n); i += grid.size()) s += in[i];
  red[block.thread_rank()] = s;
  block.sync();
  for (unsigned int k = block.size() / 2; k > 0; k >>= 1) {
    if (block.thread_rank() < k) red[block.thread_rank()] += red[block.thread_rank() + k];
    block.sync();
  }
  if (block.thread_rank() == 0) partial[blockIdx.x] = red[0];
  grid.sync();
  if (blockIdx.x == 0) {
    float t = 0.0f;
    for (unsigned int b = block.thread_rank(); b < gridDim.x; b += block.size()) t += partial[b];
    red[block.thread_rank()] = t;
    block.sync();
    for (unsigned int k = block.size() / 2; k > 0; k >>= 1) {
      if (block.thread_rank() < k) red[block.thread_rank()] += red[block.thread_rank() + k];
      block.sync();
    }
    if (block.thread_rank() == 0) *out = red[0];
  }
}

hipError_t launch_jacobi(float* u, float* v, int n, int iters) {
  int device = 0, num_sms = 0, blocks_per_sm = 0;
  hipError_t e = hipGetDevice(&device);
  if (e != hipSuccess) return e;
  e = hipDeviceGetAttribute(&num_sms, hipDeviceAttributeMultiprocessorCount, device);
  if (e != hipSuccess) return e;
  e = hipOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, jacobi_persistent, 256, 0);
  if (e != hipSuccess) return e;
  void* args[] = {&u, &v, &n, &iters};
  return hipLaunchCooperativeKernel(reinterpret_cast<void*>(jacobi_persistent), dim3(num_sms * blocks_per_sm), dim3(256),
                                    args, 0, nullptr);
}
