// Dynamic LDS: `extern __shared__` arrays, HIP_DYNAMIC_SHARED, one dynamic buffer carved into two
// arrays of different types, and a templated kernel reinterpreting the dynamic buffer (rocPRIM style).
#include <hip/hip_runtime.h>

// Old-style HIP (HIP-Examples) macro: expands to `extern __shared__ float sdata[];`.
__global__ void reverse_array_dyn(int* __restrict__ d, int n) {
  HIP_DYNAMIC_SHARED(int, s)
  const int t = threadIdx.x;
  const int tr = n - t - 1;
  if (t < n) s[t] = d[t];
  __syncthreads();
  if (t < n) d[t] = s[tr];
}

__global__ void row_softmax(const float* __restrict__ x, float* __restrict__ y, int cols) {
  extern __shared__ float buf[];  // blockDim.x floats, sized at launch
  const float* row = x + static_cast<size_t>(blockIdx.x) * cols;
  float* out = y + static_cast<size_t>(blockIdx.x) * cols;

  float m = -INFINITY;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, row[c]);
  buf[threadIdx.x] = m;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] = fmaxf(buf[threadIdx.x], buf[threadIdx.x + s]);
    __syncthreads();
  }
  m = buf[0];
  __syncthreads();

  float sum = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) sum += __expf(row[c] - m);
  buf[threadIdx.x] = sum;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  const float inv = 1.0f / buf[0];
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[c] = __expf(row[c] - m) * inv;
}

// One dynamic allocation split by hand: doubles first (8-byte aligned), then the keys.
__global__ void gather_pairs(const double* __restrict__ vals, const unsigned short* __restrict__ keys,
                             double* __restrict__ out, int n) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  double* s_vals = reinterpret_cast<double*>(smem_raw);
  unsigned short* s_keys = reinterpret_cast<unsigned short*>(s_vals + blockDim.x);

  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  s_vals[threadIdx.x] = gid < n ? vals[gid] : 0.0;
  s_keys[threadIdx.x] = gid < n ? keys[gid] : 0;
  __syncthreads();
  const unsigned short k = s_keys[threadIdx.x] % blockDim.x;
  if (gid < n) out[gid] = s_vals[k] + s_vals[threadIdx.x];
}

namespace detail {
template <typename T>
__device__ inline T* dynamic_lds() {
  extern __shared__ __align__(sizeof(double)) unsigned char lds_storage[];
  return reinterpret_cast<T*>(lds_storage);
}
}  // namespace detail

template <typename T, unsigned int ItemsPerThread>
__global__ void block_load_store_dynamic(const T* __restrict__ in, T* __restrict__ out, unsigned int n) {
  T* tile = detail::dynamic_lds<T>();
  const unsigned int base = blockIdx.x * blockDim.x * ItemsPerThread;
#pragma unroll
  for (unsigned int i = 0; i < ItemsPerThread; ++i) {
    const unsigned int idx = base + i * blockDim.x + threadIdx.x;  // striped load
    tile[i * blockDim.x + threadIdx.x] = idx < n ? in[idx] : T(0);
  }
  __syncthreads();
  T thread_sum = T(0);
#pragma unroll
  for (unsigned int i = 0; i < ItemsPerThread; ++i) thread_sum += tile[threadIdx.x * ItemsPerThread + i];  // blocked read
  if (base / ItemsPerThread + threadIdx.x < n) out[blockIdx.x * blockDim.x + threadIdx.x] = thread_sum;
}

template __global__ void block_load_store_dynamic<float, 4>(const float*, float*, unsigned int);
template __global__ void block_load_store_dynamic<double, 2>(const double*, double*, unsigned int);
template __global__ void block_load_store_dynamic<int, 8>(const int*, int*, unsigned int);
