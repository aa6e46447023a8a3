#include "launcher/common.cuh"
#include "launcher/kernels.hpp"

namespace {
__constant__ float k_weights[5] = {0.1f, 0.2f, 0.4f, 0.2f, 0.1f};

__global__ void stencil_kernel(const float* in, float* out, std::size_t n) {
  fixture::grid_stride(n, [=] __device__(std::size_t i) {
    float acc = 0;
    for (int k = -2; k <= 2; ++k) {
      long j = static_cast<long>(i) + k;
      if (j >= 0 && j < static_cast<long>(n)) acc += k_weights[k + 2] * in[j];
    }
    out[i] = acc;
  });
}
}  // namespace

void fixture::stencil(const float* in, float* out, std::size_t n) {
  stencil_kernel<<<blocks_for(n), k_block>>>(in, out, n);
}
