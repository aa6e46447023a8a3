// Two `extern __shared__` arrays of different types and alignments in one kernel (they alias), carved apart by hand.
#include <cuda_runtime.h>
#include <cstdint>

// Both declarations name the same dynamic shared allocation; the kernel places the double
// accumulators first (8-byte aligned) and the int bin counters after them.
__global__ void weighted_histogram(const int* __restrict__ keys, const double* __restrict__ weights, int n,
                                   int bins, unsigned long long* __restrict__ counts, double* __restrict__ sums) {
  extern __shared__ double s_sums[];
  extern __shared__ __align__(8) unsigned char s_raw[];
  unsigned int* s_counts = reinterpret_cast<unsigned int*>(s_raw + bins * sizeof(double));

  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    s_sums[b] = 0.0;
    s_counts[b] = 0u;
  }
  __syncthreads();

  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    int k = keys[i];
    if (k < 0 || k >= bins) continue;
    atomicAdd(&s_sums[k], weights[i]);
    atomicAdd(&s_counts[k], 1u);
  }
  __syncthreads();

  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    if (s_counts[b] != 0u) {
      atomicAdd(&counts[b], static_cast<unsigned long long>(s_counts[b]));
      atomicAdd(&sums[b], s_sums[b]);
    }
  }
}

// The same pattern with short and float4 views of one dynamic buffer: a gather of 16-bit indices
// followed by a vector load table.
__global__ void gather_rows(const unsigned short* __restrict__ idx, const float4* __restrict__ table, int rows,
                            float4* __restrict__ out) {
  extern __shared__ __align__(16) float4 s_rows[];
  extern __shared__ unsigned short s_idx_base[];
  const int per_block = blockDim.x;
  const int t = threadIdx.x;
  unsigned short* s_idx = s_idx_base + per_block * (sizeof(float4) / sizeof(unsigned short));
  const int base = blockIdx.x * per_block;
  if (base + t < rows) s_idx[t] = idx[base + t];
  __syncthreads();
  if (base + t < rows) s_rows[t] = table[s_idx[t]];
  __syncthreads();
  // Reverse within the block to make the shared staging observable.
  const int src = per_block - 1 - t;
  if (base + src < rows && base + t < rows) out[base + t] = s_rows[src];
}
