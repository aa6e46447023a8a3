// __launch_bounds__ in HIP's two forms (max threads; max threads + min waves per EU), a templated
// kernel with __launch_bounds__(BlockSize), and the raw amdgpu_flat_work_group_size /
// amdgpu_waves_per_eu attributes composable_kernel and rocBLAS use.
#include <hip/hip_runtime.h>

__global__ void __launch_bounds__(256) saxpy_lb256(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// HIP's second argument is MIN_WARPS_PER_EXECUTION_UNIT (occupancy), not CUDA's min blocks per SM.
__global__ void __launch_bounds__(1024, 2) heavy_registers(const double* __restrict__ in, double* __restrict__ out,
                                                           int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double r[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) r[k] = in[(i + k * 97) % n];
  double acc = 0.0;
#pragma unroll
  for (int k = 0; k < 16; ++k) acc = fma(r[k], r[(k + 5) & 15], acc);
  out[i] = acc;
}

__global__ void __launch_bounds__(64, 8) small_block_high_occupancy(unsigned int* __restrict__ v, int n) {
  const int i = blockIdx.x * 64 + threadIdx.x;
  if (i < n) v[i] = __brev(v[i]) ^ __popc(v[i]);
}

template <unsigned int BlockSize>
__global__ void __launch_bounds__(BlockSize) copy_transpose_rows(const float* __restrict__ in, float* __restrict__ out,
                                                                 int rows, int cols) {
  __shared__ float row_buf[BlockSize];
  const int r = blockIdx.x;
  for (int c0 = 0; c0 < cols; c0 += BlockSize) {
    const int c = c0 + threadIdx.x;
    row_buf[threadIdx.x] = (c < cols) ? in[r * cols + c] : 0.0f;
    __syncthreads();
    if (c < cols) out[c * rows + r] = row_buf[threadIdx.x];
    __syncthreads();
  }
}
template __global__ void copy_transpose_rows<128>(const float*, float*, int, int);
template __global__ void copy_transpose_rows<512>(const float*, float*, int, int);

// Raw AMDGPU attributes: a fixed 256-thread range and a waves-per-EU window.
__global__ __attribute__((amdgpu_flat_work_group_size(256, 256), amdgpu_waves_per_eu(2, 4))) void
fixed_wg_gemv(const float* __restrict__ A, const float* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  __shared__ float partial[256];
  const int row = blockIdx.x;
  float s = 0.0f;
  for (int c = threadIdx.x; c < cols; c += 256) s += A[row * cols + c] * x[c];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int k = 128; k > 0; k >>= 1) {
    if (threadIdx.x < k) partial[threadIdx.x] += partial[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0 && row < rows) y[row] = partial[0];
}
