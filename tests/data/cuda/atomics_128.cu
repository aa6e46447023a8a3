// 128-bit atomics on sm_90 (`atom.cas.b128`/`atom.exch.b128`, nvcc's atomicCAS template or inline PTX under clang) with an sm_80 fallback.
#include <cuda_runtime.h>
#include <cstdint>

// A tagged pointer / versioned pair updated as one 16-byte unit (ABA-free lock-free stack head).
struct alignas(16) Versioned {
  unsigned long long ptr;
  unsigned long long version;
};

__device__ __forceinline__ bool same(const Versioned& a, const Versioned& b) { return a.ptr == b.ptr && a.version == b.version; }

#if __CUDA_ARCH__ >= 900
__device__ __forceinline__ Versioned cas128(Versioned* addr, Versioned cmp, Versioned val) {
#if defined(__NVCC__)
  return atomicCAS(addr, cmp, val);  // CUDA 12.4+ template in sm_90_rt.h (nvcc only)
#else
  // clang-22 does not get sm_90_rt.h's 128-bit templates: the same instruction in inline PTX (ISA 8.3+).
  Versioned old;
  asm volatile(
      "{\n\t.reg .b128 d, c, v;\n\t"
      "mov.b128 c, {%2, %3};\n\t"
      "mov.b128 v, {%4, %5};\n\t"
      "atom.global.acq_rel.gpu.cas.b128 d, [%6], c, v;\n\t"
      "mov.b128 {%0, %1}, d;\n\t}"
      : "=l"(old.ptr), "=l"(old.version)
      : "l"(cmp.ptr), "l"(cmp.version), "l"(val.ptr), "l"(val.version), "l"(addr)
      : "memory");
  return old;
#endif
}

__device__ __forceinline__ Versioned exch128(Versioned* addr, Versioned val) {
  Versioned old;
  asm volatile(
      "{\n\t.reg .b128 d, v;\n\t"
      "mov.b128 v, {%2, %3};\n\t"
      "atom.global.relaxed.gpu.exch.b128 d, [%4], v;\n\t"
      "mov.b128 {%0, %1}, d;\n\t}"
      : "=l"(old.ptr), "=l"(old.version)
      : "l"(val.ptr), "l"(val.version), "l"(addr)
      : "memory");
  return old;
}
#else
// Pre-sm_90: a per-object spin lock (the version word's top bit) around two 64-bit stores.
__device__ __forceinline__ Versioned cas128(Versioned* addr, Versioned cmp, Versioned val) {
  unsigned long long* lockw = &addr->version;
  const unsigned long long kLock = 1ull << 63;
  unsigned long long v;
  do {
    v = atomicOr(lockw, kLock);
  } while (v & kLock);
  __threadfence();
  Versioned old{addr->ptr, v};
  if (same(old, cmp)) {
    addr->ptr = val.ptr;
    __threadfence();
    atomicExch(lockw, val.version & ~kLock);
  } else {
    __threadfence();
    atomicExch(lockw, v);
  }
  return old;
}
__device__ __forceinline__ Versioned exch128(Versioned* addr, Versioned val) {
  Versioned old = *addr, seen;
  while (!same(seen = cas128(addr, old, val), old)) old = seen;
  return old;
}
#endif

struct Node {
  unsigned long long next;
  int payload;
};

// Lock-free Treiber stack push/pop with a versioned head.
__global__ void stack_push(Versioned* head, Node* nodes, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  nodes[i].payload = i * 3;
  Versioned cur = *head;
  for (;;) {
    nodes[i].next = cur.ptr;
    __threadfence();
    const Versioned want{reinterpret_cast<unsigned long long>(&nodes[i]), cur.version + 1};
    const Versioned seen = cas128(head, cur, want);
    if (same(seen, cur)) break;
    cur = seen;
  }
}

__global__ void stack_pop(Versioned* head, int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Versioned cur = *head;
  while (cur.ptr != 0) {
    const Node* node = reinterpret_cast<const Node*>(cur.ptr);
    const Versioned want{node->next, cur.version + 1};
    const Versioned seen = cas128(head, cur, want);
    if (same(seen, cur)) {
      out[i] = node->payload;
      return;
    }
    cur = seen;
  }
  out[i] = -1;
}

__global__ void reset_slots(Versioned* slots, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) exch128(&slots[i], Versioned{0ull, static_cast<unsigned long long>(i)});
}
