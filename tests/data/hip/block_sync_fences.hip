// Block synchronisation and memory fences: __syncthreads, __threadfence (the "last block" reduction
// of the threadFenceReduction sample), __threadfence_block, __threadfence_system with a host-visible flag.
#include <hip/hip_runtime.h>

#define BLOCK_SIZE 256

// Each block reduces its slice into partial[blockIdx.x]; the last block to finish (detected with an
// atomic ticket after a device-wide fence) sums the partials. The fence makes the partial visible to
// whichever block ends up last.
__device__ unsigned int retirement_count = 0;

__global__ void sum_single_pass(const float* __restrict__ in, float* __restrict__ partial,
                                float* __restrict__ result, unsigned int n) {
  __shared__ float sdata[BLOCK_SIZE];
  __shared__ bool am_last;

  const unsigned int tid = threadIdx.x;
  const unsigned int grid = gridDim.x * blockDim.x * 2;
  unsigned int i = blockIdx.x * blockDim.x * 2 + tid;

  float acc = 0.0f;
  while (i < n) {
    acc += in[i];
    if (i + blockDim.x < n) acc += in[i + blockDim.x];
    i += grid;
  }
  sdata[tid] = acc;
  __syncthreads();

  for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (tid < s) sdata[tid] += sdata[tid + s];
    __syncthreads();
  }

  if (tid == 0) {
    partial[blockIdx.x] = sdata[0];
    // Make this block's partial visible device-wide before taking the ticket.
    __threadfence();
    const unsigned int ticket = atomicInc(&retirement_count, gridDim.x);
    am_last = (ticket == gridDim.x - 1);
  }
  __syncthreads();

  if (am_last) {
    float total = 0.0f;
    for (unsigned int b = tid; b < gridDim.x; b += blockDim.x) total += partial[b];
    sdata[tid] = total;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (tid < s) sdata[tid] += sdata[tid + s];
      __syncthreads();
    }
    if (tid == 0) {
      *result = sdata[0];
      retirement_count = 0;
    }
  }
}

// Producer/consumer inside one block through LDS: the producer wave publishes a value and then a
// flag; __threadfence_block orders the two stores for the block's other waves.
__global__ void block_mailbox(int* __restrict__ out, int rounds) {
  __shared__ volatile int mailbox;
  __shared__ volatile int ready;
  if (threadIdx.x == 0) {
    mailbox = 0;
    ready = 0;
  }
  __syncthreads();

  for (int r = 0; r < rounds; ++r) {
    if (threadIdx.x == 0) {
      mailbox = r * 7 + 1;
      __threadfence_block();
      ready = r + 1;
    }
    __syncthreads();
    if (ready == r + 1) out[blockIdx.x * blockDim.x + threadIdx.x] += mailbox;
    __syncthreads();
  }
}

// Device-to-host signalling: results are written to pinned host memory, then a system-scope fence
// orders them before the flag the CPU polls.
__global__ void publish_to_host(const float* __restrict__ src, float* host_dst, volatile int* host_flag,
                                int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  if (gid < n) host_dst[gid] = src[gid] * 2.0f;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    atomicAdd_system(const_cast<int*>(host_flag), 1);
  }
}

// __syncthreads_count/_and/_or: block-wide predicates.
__global__ void block_predicates(const int* __restrict__ v, int* __restrict__ stats, int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  const int x = gid < n ? v[gid] : 0;
  const int positives = __syncthreads_count(x > 0);
  const int all_even = __syncthreads_and((x & 1) == 0);
  const int any_big = __syncthreads_or(x > 1000);
  if (threadIdx.x == 0) {
    stats[3 * blockIdx.x + 0] = positives;
    stats[3 * blockIdx.x + 1] = all_even;
    stats[3 * blockIdx.x + 2] = any_big;
  }
}
