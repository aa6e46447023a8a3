// `__device__` and `__managed__` globals: counters, a work queue, a lookup table and a managed config (managed is nvcc-only).
#include <cuda_runtime.h>

// clang-22 accepts `managed` only for HIP: in CUDA mode it warns and ignores the attribute, leaving a
// host-only variable that device code may not reference. Under clang the managed variables are plain
// __device__ globals (the host side would allocate/bind them itself); nvcc sees real __managed__.
#if defined(__clang__) && !defined(__NVCC__)
#define KC_MANAGED __device__
#else
#define KC_MANAGED __managed__
#endif

struct QueueState {
  unsigned int head;
  unsigned int tail;
  unsigned int overflow;
};

__device__ QueueState g_queue;
__device__ unsigned int g_items[1 << 16];
__device__ float g_sin_table[1024];
__device__ unsigned long long g_processed = 0;
__device__ int g_retired_blocks;

struct RunConfig {
  int iterations;
  float threshold;
  int verbose;
};
KC_MANAGED RunConfig m_config = {8, 0.5f, 0};
KC_MANAGED double m_result[4];
KC_MANAGED int m_done;

__global__ void build_sin_table() {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 1024) g_sin_table[i] = sinpif(static_cast<float>(i) / 512.f);
}

// Producer: push indices whose value passes the managed threshold into the device-global queue.
__global__ void enqueue_above(const float* __restrict__ v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n || v[i] <= m_config.threshold) return;
  const unsigned slot = atomicAdd(&g_queue.tail, 1u);
  if (slot < (1u << 16)) g_items[slot] = static_cast<unsigned>(i);
  else atomicAdd(&g_queue.overflow, 1u);
}

// Consumer: drain the queue, use the table, accumulate into managed memory; the last block to
// finish (threadfence reduction pattern) publishes the result.
__global__ void drain_queue(const float* __restrict__ v, float* __restrict__ out) {
  __shared__ bool am_last;
  double local = 0.0;
  for (int it = 0; it < m_config.iterations; ++it) {
    const unsigned idx = atomicAdd(&g_queue.head, 1u);
    if (idx >= min(g_queue.tail, 1u << 16)) break;
    const unsigned item = g_items[idx];
    const float s = g_sin_table[item & 1023];
    out[item] = v[item] * s;
    local += s;
    atomicAdd(&g_processed, 1ull);
  }
  atomicAdd(&m_result[blockIdx.x & 3], local);
  __threadfence();
  if (threadIdx.x == 0) am_last = atomicAdd(reinterpret_cast<unsigned*>(&g_retired_blocks), 1u) == gridDim.x - 1;
  __syncthreads();
  if (am_last && threadIdx.x == 0) {
    m_done = 1;
    g_retired_blocks = 0;
    if (m_config.verbose) m_result[0] += static_cast<double>(g_processed);
  }
}
