// Templated kernels with explicit instantiation: functor-based elementwise ops (type x op), a
// templated block reduction over block sizes, and vectorised loads through HIP's float4/int4 types.
#include <hip/hip_runtime.h>

struct Plus {
  template <typename T> __device__ T operator()(T a, T b) const { return a + b; }
};
struct Mul {
  template <typename T> __device__ T operator()(T a, T b) const { return a * b; }
};
struct Max {
  template <typename T> __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};
template <typename T> struct Axpby {
  T alpha, beta;
  __device__ T operator()(T a, T b) const { return alpha * a + beta * b; }
};

template <typename T, typename Op>
__global__ void binary_elementwise(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, size_t n, Op op) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) c[i] = op(a[i], b[i]);
}

#define INSTANTIATE_BINARY(T)                                                                                   \
  template __global__ void binary_elementwise<T, Plus>(const T*, const T*, T*, size_t, Plus);                   \
  template __global__ void binary_elementwise<T, Mul>(const T*, const T*, T*, size_t, Mul);                     \
  template __global__ void binary_elementwise<T, Max>(const T*, const T*, T*, size_t, Max);                     \
  template __global__ void binary_elementwise<T, Axpby<T>>(const T*, const T*, T*, size_t, Axpby<T>);
INSTANTIATE_BINARY(float)
INSTANTIATE_BINARY(double)
INSTANTIATE_BINARY(int)
INSTANTIATE_BINARY(long long)
#undef INSTANTIATE_BINARY

template <typename T, unsigned int BlockSize, typename Op>
__global__ void __launch_bounds__(BlockSize) block_reduce(const T* __restrict__ in, T* __restrict__ out, unsigned int n,
                                                          T identity, Op op) {
  __shared__ T sdata[BlockSize];
  const unsigned int tid = threadIdx.x;
  T acc = identity;
  for (unsigned int i = blockIdx.x * BlockSize * 2 + tid; i < n; i += gridDim.x * BlockSize * 2) {
    acc = op(acc, in[i]);
    if (i + BlockSize < n) acc = op(acc, in[i + BlockSize]);
  }
  sdata[tid] = acc;
  __syncthreads();
#pragma unroll
  for (unsigned int s = BlockSize / 2; s > 0; s >>= 1) {
    if (tid < s) sdata[tid] = op(sdata[tid], sdata[tid + s]);
    __syncthreads();
  }
  if (tid == 0) out[blockIdx.x] = sdata[0];
}

template __global__ void block_reduce<float, 64, Plus>(const float*, float*, unsigned int, float, Plus);
template __global__ void block_reduce<float, 256, Plus>(const float*, float*, unsigned int, float, Plus);
template __global__ void block_reduce<float, 1024, Max>(const float*, float*, unsigned int, float, Max);
template __global__ void block_reduce<double, 256, Plus>(const double*, double*, unsigned int, double, Plus);
template __global__ void block_reduce<int, 128, Max>(const int*, int*, unsigned int, int, Max);
template __global__ void block_reduce<unsigned int, 512, Plus>(const unsigned int*, unsigned int*, unsigned int,
                                                               unsigned int, Plus);

// Vectorised copy-scale through 16-byte vector types.
template <typename Vec, typename Scalar>
__global__ void scale_vectorized(const Vec* __restrict__ in, Vec* __restrict__ out, Scalar s, size_t nvec) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < nvec) {
    Vec v = in[i];
    v.x *= s;
    v.y *= s;
    v.z *= s;
    v.w *= s;
    out[i] = v;
  }
}
template __global__ void scale_vectorized<float4, float>(const float4*, float4*, float, size_t);
template __global__ void scale_vectorized<int4, int>(const int4*, int4*, int, size_t);
template __global__ void scale_vectorized<double4, double>(const double4*, double4*, double, size_t);
