// Reductions: a block sum, a block scan and a shared-memory histogram.
#include "launcher/common.cuh"
#include "launcher/kernels.hpp"

// reduce
namespace {
template <int Block>
__global__ void reduce_kernel(const float* in, float* out, std::size_t n) {
  __shared__ float partial[Block / 32];
  float v = 0;
  fixture::grid_stride(n, [&] __device__(std::size_t i) { v += in[i]; });
  v = fixture::warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    v = threadIdx.x < Block / 32 ? partial[threadIdx.x] : 0.f;
    v = fixture::warp_sum(v);
    if (threadIdx.x == 0) atomicAdd(out, v);
  }
}
}  // namespace

void fixture::reduce(const float* in, float* out, std::size_t n) {
  reduce_kernel<k_block><<<blocks_for(n), k_block>>>(in, out, n);
}

// scan
namespace {
// Blelloch scan of one block's worth; enough for the fixture.
__global__ void scan_kernel(const int* in, int* out, std::size_t n) {
  extern __shared__ int buf[];
  int t = threadIdx.x;
  buf[t] = t < static_cast<int>(n) ? in[t] : 0;
  for (int stride = 1; stride < blockDim.x; stride *= 2) {
    __syncthreads();
    int v = t >= stride ? buf[t - stride] : 0;
    __syncthreads();
    buf[t] += v;
  }
  if (t < static_cast<int>(n)) out[t] = buf[t];
}
}  // namespace

void fixture::scan(const int* in, int* out, std::size_t n) {
  scan_kernel<<<1, k_block, k_block * sizeof(int)>>>(in, out, n);
}

// histogram
namespace {
__global__ void histogram_kernel(const unsigned char* in, unsigned* bins, std::size_t n) {
  __shared__ unsigned local[256];
  for (int b = threadIdx.x; b < 256; b += blockDim.x) local[b] = 0;
  __syncthreads();
  fixture::grid_stride(n, [&] __device__(std::size_t i) { atomicAdd(&local[in[i]], 1u); });
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x) atomicAdd(&bins[b], local[b]);
}
}  // namespace

void fixture::histogram(const unsigned char* in, unsigned* bins, std::size_t n) {
  histogram_kernel<<<blocks_for(n), k_block>>>(in, bins, n);
}
