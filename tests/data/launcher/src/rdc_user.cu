#include "launcher/common.cuh"
#include "launcher/kernels.hpp"

__device__ float rdc_scale(float v);  // src/rdc_math.cu

namespace {
__global__ void rdc_kernel(float* data, std::size_t n) {
  fixture::grid_stride(n, [=] __device__(std::size_t i) { data[i] = rdc_scale(data[i]); });
}
}  // namespace

void fixture::rdc_apply(float* data, std::size_t n) { rdc_kernel<<<blocks_for(n), k_block>>>(data, n); }
