// Cooperative groups grid-wide barrier (`this_grid().sync()`): a persistent multi-phase kernel (rdc, launched cooperatively).
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

// Persistent conjugate-gradient-style iteration on a 1D Laplacian: every phase is separated by a
// grid-wide barrier instead of separate kernel launches.
__global__ void cg_laplace_persistent(int n, const float* __restrict__ b, float* __restrict__ x, float* __restrict__ r,
                                      float* __restrict__ p, float* __restrict__ ap, double* __restrict__ scalars,
                                      int iterations) {
  cg::grid_group grid = cg::this_grid();
  cg::thread_block block = cg::this_thread_block();
  __shared__ double partial[32];
  const unsigned long long tid = grid.thread_rank();
  const unsigned long long nthreads = grid.size();
  auto block_sum = [&](double v) {
    auto warp = cg::tiled_partition<32>(block);
    for (int off = 16; off > 0; off >>= 1) v += warp.shfl_down(v, off);
    if (warp.thread_rank() == 0) partial[warp.meta_group_rank()] = v;
    block.sync();
    if (block.thread_rank() == 0) {
      double s = 0.0;
      for (unsigned w = 0; w < warp.meta_group_size(); ++w) s += partial[w];
      atomicAdd(&scalars[0], s);
    }
    block.sync();
  };

  for (unsigned long long i = tid; i < unsigned(n); i += nthreads) {
    x[i] = 0.f;
    r[i] = b[i];
    p[i] = b[i];
  }
  if (tid == 0) scalars[0] = 0.0;
  grid.sync();
  double rr_local = 0.0;
  for (unsigned long long i = tid; i < unsigned(n); i += nthreads) rr_local += double(r[i]) * r[i];
  block_sum(rr_local);
  grid.sync();
  double rr = scalars[0];

  for (int it = 0; it < iterations; ++it) {
    // ap = A p with A = tridiag(-1, 2, -1)
    for (unsigned long long i = tid; i < unsigned(n); i += nthreads) {
      const float left = i > 0 ? p[i - 1] : 0.f;
      const float right = i + 1 < unsigned(n) ? p[i + 1] : 0.f;
      ap[i] = 2.f * p[i] - left - right;
    }
    if (tid == 0) scalars[0] = 0.0;
    grid.sync();
    double pap_local = 0.0;
    for (unsigned long long i = tid; i < unsigned(n); i += nthreads) pap_local += double(p[i]) * ap[i];
    block_sum(pap_local);
    grid.sync();
    const double alpha = rr / scalars[0];
    grid.sync();
    if (tid == 0) scalars[0] = 0.0;
    grid.sync();
    double rr_new_local = 0.0;
    for (unsigned long long i = tid; i < unsigned(n); i += nthreads) {
      x[i] += float(alpha) * p[i];
      r[i] -= float(alpha) * ap[i];
      rr_new_local += double(r[i]) * r[i];
    }
    block_sum(rr_new_local);
    grid.sync();
    const double rr_new = scalars[0];
    const float beta = float(rr_new / rr);
    rr = rr_new;
    for (unsigned long long i = tid; i < unsigned(n); i += nthreads) p[i] = r[i] + beta * p[i];
    grid.sync();
  }
  if (tid == 0) scalars[1] = rr;
}

// Grid-wide histogram equalisation: build histogram, grid sync, one block scans, grid sync, remap.
__global__ void equalize_persistent(const unsigned char* __restrict__ in, unsigned char* __restrict__ out, int n,
                                    unsigned* __restrict__ hist, unsigned* __restrict__ cdf) {
  cg::grid_group grid = cg::this_grid();
  for (unsigned long long i = grid.thread_rank(); i < unsigned(n); i += grid.size()) atomicAdd(&hist[in[i]], 1u);
  grid.sync();
  if (grid.block_rank() == 0 && threadIdx.x == 0) {
    unsigned run = 0;
    for (int v = 0; v < 256; ++v) {
      run += hist[v];
      cdf[v] = run;
    }
  }
  grid.sync();
  const float scale = 255.f / float(n);
  for (unsigned long long i = grid.thread_rank(); i < unsigned(n); i += grid.size())
    out[i] = static_cast<unsigned char>(fminf(255.f, cdf[in[i]] * scale));
  grid.sync();
  if (grid.thread_rank() < 256) hist[grid.thread_rank()] = 0u;
}
