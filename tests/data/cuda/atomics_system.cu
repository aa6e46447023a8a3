// System-scope atomics (`atomicAdd_system`, `atomicCAS_system`, `atomicExch_system`, `atomicMax_system`) for host-visible pinned memory, plus block scope.
#include <cuda_runtime.h>

struct HostMailbox {
  unsigned long long bytes_done;
  int progress_pct;
  int error_code;
  unsigned int lock;
  float max_residual;
  double energy;
};

// A kernel streaming chunks and reporting progress to a host-mapped (zero-copy) mailbox that the CPU
// polls concurrently: every update must be a system-scope atomic.
__global__ void stream_with_progress(const float* __restrict__ in, float* __restrict__ out, size_t n,
                                     HostMailbox* __restrict__ box) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  float local_max = 0.f;
  double local_energy = 0.0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const float v = in[i];
    const float r = v * v - 1.f;
    out[i] = r;
    local_max = fmaxf(local_max, fabsf(r));
    local_energy += static_cast<double>(v) * v;
    if (!(r == r)) atomicCAS_system(&box->error_code, 0, 1);  // first NaN wins
  }
  // Block-scope combine first, then one system-scope update per block.
  __shared__ float blk_max;
  __shared__ double blk_energy;
  if (threadIdx.x == 0) { blk_max = 0.f; blk_energy = 0.0; }
  __syncthreads();
  atomicMax_block(reinterpret_cast<int*>(&blk_max), __float_as_int(local_max));  // non-negative floats order as ints
  atomicAdd_block(&blk_energy, local_energy);
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicMax_system(reinterpret_cast<int*>(&box->max_residual), __float_as_int(blk_max));
    atomicAdd_system(&box->energy, blk_energy);
    const unsigned long long done =
        atomicAdd_system(&box->bytes_done, static_cast<unsigned long long>(blockDim.x) * sizeof(float)) +
        blockDim.x * sizeof(float);
    const int pct = static_cast<int>((100ull * done) / (n * sizeof(float) + 1));
    atomicMax_system(&box->progress_pct, pct);
  }
}

// A spin lock in host-visible memory shared with the CPU: acquire with atomicCAS_system,
// release with atomicExch_system and a system fence.
__global__ void locked_append(int* __restrict__ host_log, unsigned int* __restrict__ log_len, HostMailbox* box, int value) {
  if (threadIdx.x != 0) return;
  while (atomicCAS_system(&box->lock, 0u, 1u) != 0u) __nanosleep(64);
  __threadfence_system();
  const unsigned slot = *log_len;
  host_log[slot] = value + static_cast<int>(blockIdx.x);
  *log_len = slot + 1;
  __threadfence_system();
  atomicExch_system(&box->lock, 0u);
}

// Peer-GPU counters: system-scope float/double adds and integer inc/and/or.
__global__ void peer_counters(float* fsum, double* dsum, unsigned* wrap, unsigned* flags, const float* v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  atomicAdd_system(fsum, v[i]);
  atomicAdd_system(dsum, static_cast<double>(v[i]) * 0.5);
  atomicInc_system(wrap, 1023u);
  if (v[i] < 0.f) atomicOr_system(flags, 1u << (i & 31));
  else atomicAnd_system(flags, ~(1u << ((i + 7) & 31)));
}
