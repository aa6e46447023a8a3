// The CUDA source counterpart of tests/data/kernels/reduce_shared.ll.
__global__ void block_sum(const float *in, float *out) {
  __shared__ float tile[256];
  unsigned t = threadIdx.x;
  tile[t] = in[blockIdx.x * 256 + t];
  __syncthreads();
  for (unsigned stride = 128; stride != 0; stride >>= 1) {
    if (t < stride) tile[t] += tile[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = tile[0];
}
