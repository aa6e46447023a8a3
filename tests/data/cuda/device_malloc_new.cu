// Device heap: `malloc`/`free`, `new`/`delete`, `new[]`/`delete[]` and placement new in kernels (per-thread scratch, block-shared allocations, linked lists).
#include <cstdlib>
#include <new>

struct Particle {
  float x, y, z, w;
  __device__ Particle() : x(0.f), y(0.f), z(0.f), w(1.f) {}
  __device__ Particle(float a, float b, float c) : x(a), y(b), z(c), w(1.f) {}
  __device__ ~Particle() { w = 0.f; }
};

struct ListNode {
  int value;
  ListNode* next;
};

// Per-thread variable-size scratch from the device heap (sizes known only at run time).
__global__ void per_thread_scratch(const int* __restrict__ lens, float* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int len = lens[i];
  float* tmp = static_cast<float*>(malloc(sizeof(float) * len));
  if (!tmp) {
    out[i] = -1.f;
    return;
  }
  for (int k = 0; k < len; ++k) tmp[k] = static_cast<float>(k) * 0.5f;
  float s = 0.f;
  for (int k = len - 1; k >= 0; --k) s += tmp[k];
  out[i] = s;
  free(tmp);
}

// One allocation per block shared by all its threads (pointer handed over via shared memory).
__global__ void block_shared_heap(float* __restrict__ out, int per_thread) {
  __shared__ Particle* block_buf;
  if (threadIdx.x == 0) block_buf = new Particle[blockDim.x * per_thread];
  __syncthreads();
  if (!block_buf) return;
  for (int k = 0; k < per_thread; ++k) {
    Particle* p = &block_buf[threadIdx.x * per_thread + k];
    p->~Particle();
    new (p) Particle(float(threadIdx.x), float(k), float(blockIdx.x));
  }
  __syncthreads();
  float s = 0.f;
  for (int k = 0; k < per_thread; ++k) {
    const Particle& p = block_buf[((threadIdx.x + 1) % blockDim.x) * per_thread + k];
    s += p.x + p.y + p.z * p.w;
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.x == 0) delete[] block_buf;
}

// Build, reverse and free a per-thread linked list with new/delete.
__global__ void linked_list_roundtrip(int* __restrict__ out, int length) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  ListNode* head = nullptr;
  for (int k = 0; k < length; ++k) {
    ListNode* node = new ListNode{i * length + k, head};
    if (!node) break;
    head = node;
  }
  ListNode* rev = nullptr;
  while (head) {
    ListNode* next = head->next;
    head->next = rev;
    rev = head;
    head = next;
  }
  int checksum = 0, pos = 0;
  while (rev) {
    checksum += rev->value * (++pos);
    ListNode* dead = rev;
    rev = rev->next;
    delete dead;
  }
  out[i] = checksum;
}
