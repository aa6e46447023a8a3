// Device printf (hostcall-based __ockl_printf_*) with integer, float, string and pointer formats,
// and assert() (HIP's __assert_fail prints and traps), as debug-instrumented kernels use them.
#include <hip/hip_runtime.h>
#include <cassert>

__global__ void hello_world(int iteration) {
  // blockIdx.x is HIP 5.2's coordinate proxy struct; variadic printf needs the integer value.
  printf("Hello from block %u, thread %u (iteration %d)\n", static_cast<unsigned>(blockIdx.x),
         static_cast<unsigned>(hipThreadIdx_x), iteration);
}

__global__ void checked_divide(const float* __restrict__ num, const float* __restrict__ den, float* __restrict__ q,
                               int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  assert(n > 0);
  if (i >= n) return;
  assert(den[i] != 0.0f && "denominator must be non-zero");
  q[i] = num[i] / den[i];
}

struct Stats {
  unsigned long long count;
  double mean;
  float max;
  const char* tag;
};

__global__ void dump_stats(const Stats* __restrict__ s, int k) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    for (int i = 0; i < k; ++i)
      printf("[%s] count=%llu mean=%.6f max=%e ptr=%p\n", s[i].tag, s[i].count, s[i].mean, static_cast<double>(s[i].max),
             static_cast<const void*>(s + i));
  }
}

// Conditional tracing of out-of-range values, one line per offending element (wave id, lane, hex).
__global__ void trace_out_of_range(const int* __restrict__ v, int lo, int hi, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && (v[i] < lo || v[i] > hi)) {
    printf("out of range: v[%d] = %d (0x%08x) wave %d lane %u; expected [%d, %d]\n", i, v[i], v[i],
           static_cast<int>(threadIdx.x) / warpSize, __lane_id(), lo, hi);
  }
}

// Bounds-checked gather with assert on every index, plus a summary printed by thread 0.
__global__ void gather_checked(const double* __restrict__ src, const long long* __restrict__ idx,
                               double* __restrict__ dst, long long src_len, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const long long j = idx[i];
    assert(j >= 0 && j < src_len);
    dst[i] = src[j];
  }
  if (i == 0) printf("gather_checked: %d elements from %lld (%s)\n", n, src_len, "ok");
}
