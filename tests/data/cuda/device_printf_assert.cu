// Device-side `printf` (many argument types, vprintf buffer) and `assert` (__assertfail) in a checked sparse-matrix validator.
#include <cstdio>
#include <cassert>
#include <cstdint>

struct CsrView {
  int rows, cols;
  long long nnz;
  const int* row_ptr;
  const int* col_idx;
  const float* vals;
};

// Validate CSR structure; report the first few problems with printf, and assert on the impossible.
__global__ void validate_csr(CsrView m, int* __restrict__ errors, int verbose) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= m.rows) return;
  assert(m.row_ptr != nullptr && m.col_idx != nullptr);
  const int begin = m.row_ptr[r], end = m.row_ptr[r + 1];
  assert(begin <= end && "row_ptr must be non-decreasing");
  int prev = -1;
  for (int j = begin; j < end; ++j) {
    const int c = m.col_idx[j];
    const float v = m.vals[j];
    if (c <= prev || c >= m.cols) {
      const int n = atomicAdd(errors, 1);
      if (n < 8)
        printf("[block %u thread %u] row %d entry %d: column %d after %d (cols=%d)\n", blockIdx.x, threadIdx.x, r, j, c, prev, m.cols);
    }
    if (!(v == v) || isinf(v)) {
      const int n = atomicAdd(errors, 1);
      if (n < 8) printf("row %d col %d: non-finite value %f (bits 0x%08x)\n", r, c, v, __float_as_uint(v));
    }
    prev = c;
  }
  if (verbose && r == 0)
    printf("csr %dx%d nnz=%lld ptr=%p first=%.3e last=%g %s\n", m.rows, m.cols, m.nnz, static_cast<const void*>(m.row_ptr),
           static_cast<double>(m.vals[0]), static_cast<double>(m.vals[m.nnz - 1]), "ok");
}

// Mixed-width printf arguments (char, short, long long, unsigned, double, size_t) and a guarded assert
// on a reduction's invariant.
__global__ void report_stats(const double* __restrict__ v, int n) {
  __shared__ double s_sum;
  __shared__ unsigned long long s_count;
  if (threadIdx.x == 0) { s_sum = 0.0; s_count = 0ull; }
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x)
    if (v[i] >= 0.0) {
      atomicAdd(&s_sum, v[i]);
      atomicAdd(&s_count, 1ull);
    }
  __syncthreads();
  if (threadIdx.x == 0) {
    assert(s_count <= static_cast<unsigned long long>(n));
    const char tag = 'S';
    const short blk = static_cast<short>(blockIdx.x);
    printf("%c%hd: sum=%.6f count=%llu mean=%e n=%zu sizeof=%u\n", tag, blk, s_sum, s_count,
           s_count ? s_sum / double(s_count) : 0.0, static_cast<size_t>(n), static_cast<unsigned>(sizeof(double)));
  }
}
