// Scoped atomics: atomicAdd_system / atomicCAS_system / atomicExch_system for host-coherent memory,
// and clang's __hip_atomic_* builtins with explicit memory orders and wavefront/workgroup/agent/system scopes.
#include <hip/hip_runtime.h>

// Multi-GPU / CPU-visible counter in fine-grained host memory.
__global__ void count_matches_system(const int* __restrict__ v, int key, unsigned long long* host_counter,
                                     float* host_sum, int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  if (gid < n && v[gid] == key) {
    atomicAdd_system(host_counter, 1ull);
    atomicAdd_system(host_sum, 1.0f);
  }
}

// A system-scope spin lock guarding a host-visible record.
struct Record {
  int owner;
  int updates;
  double value;
};

__device__ void lock_system(int* lock) {
  while (atomicCAS_system(lock, 0, 1) != 0) __builtin_amdgcn_s_sleep(2);
  __threadfence_system();
}
__device__ void unlock_system(int* lock) {
  __threadfence_system();
  atomicExch_system(lock, 0);
}

__global__ void update_record(int* lock, Record* rec, double delta) {
  if (threadIdx.x != 0) return;
  lock_system(lock);
  rec->owner = blockIdx.x;
  rec->updates += 1;
  rec->value += delta;
  unlock_system(lock);
}

// Explicit scopes with clang's builtins (what HIP's own atomics expand to).
__global__ void scoped_builtins(int* __restrict__ dev_counter, unsigned long long* __restrict__ sys_counter,
                                float* __restrict__ agent_sum, int* __restrict__ flags, int n) {
  __shared__ int wg_counter;
  if (threadIdx.x == 0) __hip_atomic_store(&wg_counter, 0, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
  __syncthreads();

  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  if (gid < n) {
    __hip_atomic_fetch_add(&wg_counter, 1, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
    __hip_atomic_fetch_add(dev_counter, 1, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
    __hip_atomic_fetch_add(sys_counter, 1ull, __ATOMIC_SEQ_CST, __HIP_MEMORY_SCOPE_SYSTEM);
    __hip_atomic_fetch_add(agent_sum, 0.5f, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
    __hip_atomic_fetch_max(&flags[1], gid, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
    __hip_atomic_fetch_min(&flags[2], gid, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WAVEFRONT);
  }
  __syncthreads();

  if (threadIdx.x == 0) {
    const int local = __hip_atomic_load(&wg_counter, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_WORKGROUP);
    int expected = 0;
    // Release the block's count; the first block to get here also claims flags[0].
    __hip_atomic_compare_exchange_strong(&flags[0], &expected, static_cast<int>(blockIdx.x) + 1, __ATOMIC_ACQ_REL,
                                         __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
    __hip_atomic_exchange(&flags[3], local, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_SYSTEM);
  }
}

// Message passing between blocks with acquire/release at agent scope.
__global__ void flag_handoff(int* __restrict__ data, int* __restrict__ flag) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    data[0] = 42;
    __hip_atomic_store(flag, 1, __ATOMIC_RELEASE, __HIP_MEMORY_SCOPE_AGENT);
  } else if (blockIdx.x == 1 && threadIdx.x == 0) {
    while (__hip_atomic_load(flag, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_AGENT) == 0) {
    }
    data[1] = data[0] + 1;
  }
}
