// Kernel parameters over 4 KiB (CUDA 12.1+, PTX ISA 8.1+, sm_70+; up to 32764 bytes): a 6 KiB by-value struct and a by-value array of pointers.
#include <cuda_runtime.h>
#include <cstdint>

// 6 KiB of filter taps and metadata passed by value (no cudaMemcpyToSymbol needed).
struct FilterBank {
  int num_filters;
  int taps_per_filter;
  float gain[32];
  float taps[32][44];  // 5632 bytes
  int offsets[64];
};
static_assert(sizeof(FilterBank) > 4096 && sizeof(FilterBank) <= 32764, "FilterBank must exceed the old 4 KiB limit");

__global__ void apply_filter_bank(const FilterBank bank, const float* __restrict__ in, float* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int f = blockIdx.y;
  if (i >= n || f >= bank.num_filters) return;
  float acc = 0.f;
  for (int t = 0; t < bank.taps_per_filter; ++t) {
    const int j = min(max(i + t - bank.taps_per_filter / 2 + bank.offsets[f & 63], 0), n - 1);
    acc = fmaf(bank.taps[f][t], in[j], acc);
  }
  out[size_t(f) * n + i] = acc * bank.gain[f];
}

// Multi-tensor apply (PyTorch's fused optimizer pattern): hundreds of tensor pointers/sizes by value.
constexpr int kMaxTensors = 320;
struct TensorListMeta {
  float* params[kMaxTensors];
  const float* grads[kMaxTensors];
  int sizes[kMaxTensors];
  int block_to_tensor[kMaxTensors];
  int block_to_chunk[kMaxTensors];
};
static_assert(sizeof(TensorListMeta) > 4096 && sizeof(TensorListMeta) <= 32764, "TensorListMeta must exceed 4 KiB");

__global__ void multi_tensor_sgd(const TensorListMeta meta, int chunk, float lr, float weight_decay) {
  const int t = meta.block_to_tensor[blockIdx.x];
  const int c = meta.block_to_chunk[blockIdx.x];
  float* p = meta.params[t];
  const float* g = meta.grads[t];
  const int n = meta.sizes[t];
  for (int i = c * chunk + threadIdx.x; i < min(n, (c + 1) * chunk); i += blockDim.x) p[i] -= lr * (g[i] + weight_decay * p[i]);
}
