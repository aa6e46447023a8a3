#include <cfloat>

#include "launcher/common.cuh"
#include "launcher/kernels.hpp"

namespace {
// One warp per row.
__global__ void softmax_kernel(const float* in, float* out, int rows, int cols) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* r = in + static_cast<long>(row) * cols;
  float m = -FLT_MAX;
  for (int c = lane; c < cols; c += 32) m = fmaxf(m, r[c]);
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  float sum = 0;
  for (int c = lane; c < cols; c += 32) sum += __expf(r[c] - m);
  sum = fixture::warp_sum(sum);
  sum = __shfl_sync(0xffffffffu, sum, 0);
  for (int c = lane; c < cols; c += 32) out[static_cast<long>(row) * cols + c] = __expf(r[c] - m) / sum;
}
}  // namespace

void fixture::softmax(const float* in, float* out, int rows, int cols) {
  softmax_kernel<<<(rows + 7) / 8, k_block>>>(in, out, rows, cols);
}
