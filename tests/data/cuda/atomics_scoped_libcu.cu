// libcu++ `cuda::atomic_ref` / `cuda::atomic` with thread scopes and memory orders: a ticket lock, a bounded MPMC ring and a release/acquire flag.
#include <cuda/atomic>
#include <cuda/std/cstdint>

using cuda::std::memory_order_acquire;
using cuda::std::memory_order_relaxed;
using cuda::std::memory_order_release;

struct Ring {
  unsigned int head;
  unsigned int tail;
  unsigned int slots[1024];
};

// Ticket lock at device scope guarding a non-atomic critical section.
__global__ void ticket_lock_sum(unsigned int* next_ticket, unsigned int* now_serving, double* total, const double* v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n || (threadIdx.x & 31) != 0) return;
  cuda::atomic_ref<unsigned int, cuda::thread_scope_device> next(*next_ticket);
  cuda::atomic_ref<unsigned int, cuda::thread_scope_device> serving(*now_serving);
  const unsigned my = next.fetch_add(1u, memory_order_relaxed);
  while (serving.load(memory_order_acquire) != my) {
  }
  double s = 0.0;
  for (int j = i; j < min(i + 32, n); ++j) s += v[j];
  *total += s;
  serving.store(my + 1u, memory_order_release);
}

// Bounded ring buffer, producers and consumers in different blocks.
__global__ void ring_produce(Ring* ring, const unsigned* items, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  cuda::atomic_ref<unsigned, cuda::thread_scope_device> tail(ring->tail);
  const unsigned slot = tail.fetch_add(1u, memory_order_relaxed);
  cuda::atomic_ref<unsigned, cuda::thread_scope_device> cell(ring->slots[slot & 1023u]);
  cell.store(items[i] | 0x80000000u, memory_order_release);
}

__global__ void ring_consume(Ring* ring, unsigned* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  cuda::atomic_ref<unsigned, cuda::thread_scope_device> head(ring->head);
  const unsigned slot = head.fetch_add(1u, memory_order_relaxed);
  cuda::atomic_ref<unsigned, cuda::thread_scope_device> cell(ring->slots[slot & 1023u]);
  unsigned v;
  while (((v = cell.load(memory_order_acquire)) & 0x80000000u) == 0u) {
  }
  cell.store(0u, memory_order_relaxed);
  out[i] = v & 0x7fffffffu;
}

// Block-scope atomics on shared memory and a system-scope min on host memory.
__global__ void block_scope_minmax(const float* v, int n, float* host_min) {
  __shared__ int s_min_bits;
  if (threadIdx.x == 0) s_min_bits = 0x7f7fffff;
  __syncthreads();
  cuda::atomic_ref<int, cuda::thread_scope_block> smin(s_min_bits);
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && v[i] >= 0.f) smin.fetch_min(__float_as_int(v[i]), memory_order_relaxed);
  __syncthreads();
  if (threadIdx.x == 0) {
    cuda::atomic_ref<int, cuda::thread_scope_system> hmin(*reinterpret_cast<int*>(host_min));
    hmin.fetch_min(smin.load(memory_order_relaxed), memory_order_relaxed);
  }
}
