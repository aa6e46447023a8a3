#include "launcher/common.cuh"
#include "launcher/kernels.hpp"

namespace {
__global__ void saxpy_kernel(float a, const float* x, float* y, std::size_t n) {
  fixture::grid_stride(n, [=] __device__(std::size_t i) { y[i] = a * x[i] + y[i]; });
}
}  // namespace

void fixture::saxpy(float a, const float* x, float* y, std::size_t n) {
  saxpy_kernel<<<blocks_for(n), k_block>>>(a, x, y, n);
}
