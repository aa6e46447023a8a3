#include "multi.cuh"

#ifndef REDUCE_LABEL
#define REDUCE_LABEL "reduce"
#endif

__global__ void fill_kernel(float* x, std::size_t n) {
  std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] = square(1.0f);  // the library's device function, across units
}

int main() {
  constexpr std::size_t n = 1024;
  float* x = nullptr;
  if (cudaMalloc(&x, n * sizeof(float)) != cudaSuccess) {
    report("no device", 0);
    return 0;
  }
  fill_kernel<<<4, 256>>>(x, n);
  report(REDUCE_LABEL, sum_of_squares(x, n));
  return 0;
}
