// Several kernels of one pipeline in one file, with the atomics they need: a shared-memory
// histogram merged into global bins, a float max through an atomicCAS loop, a 64-bit counter, and
// stream compaction that claims output slots with atomicAdd.
#include "hip_minimal.h"

constexpr unsigned k_bins = 64;

extern "C" __global__ void histogram(const unsigned char* __restrict__ data, unsigned n, unsigned* __restrict__ bins) {
  __shared__ unsigned local[k_bins];
  for (unsigned b = threadIdx.x; b < k_bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    __hip_atomic_fetch_add(&local[data[i] % k_bins], 1u, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_WORKGROUP);
  }
  __syncthreads();
  for (unsigned b = threadIdx.x; b < k_bins; b += blockDim.x) atomicAdd(&bins[b], local[b]);
}

// atomicMax for float, the classic CAS loop over the bit pattern.
__device__ float atomic_max_float(float* address, float value) {
  unsigned* bits = reinterpret_cast<unsigned*>(address);
  unsigned old = *bits;
  while (__uint_as_float(old) < value) {
    unsigned assumed = old;
    old = atomicCAS(bits, assumed, __float_as_uint(value));
    if (old == assumed) break;
  }
  return __uint_as_float(old);
}

extern "C" __global__ void max_abs(const float* __restrict__ in, unsigned n, float* __restrict__ result,
                                   unsigned long long* __restrict__ visited) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = in[i];
  atomic_max_float(result, v < 0 ? -v : v);
  atomicAdd(visited, 1ull);
}

template <typename T, typename Pred>
__device__ void compact(const T* __restrict__ in, unsigned n, T* __restrict__ out, unsigned* __restrict__ count,
                        Pred keep) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n && keep(in[i])) out[atomicAdd(count, 1u)] = in[i];
}

struct Positive {
  __device__ bool operator()(int x) const { return x > 0; }
};

template <typename T>
__global__ void compact_positive(const T* in, unsigned n, T* out, unsigned* count) {
  compact(in, n, out, count, Positive{});
}

template __global__ void compact_positive<int>(const int*, unsigned, int*, unsigned*);

extern "C" __global__ void signed_peak(const int* __restrict__ in, unsigned n, int* __restrict__ peak) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicMax(peak, in[i]);
}
