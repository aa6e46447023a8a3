#include "launcher/common.cuh"
#include "launcher/kernels.hpp"

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
