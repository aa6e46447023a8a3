// The CUDA source counterpart of tests/data/kernels/expf.ll.
__global__ void exp_all(float *x, int n) {
  int i = threadIdx.x;
  if (i < n) x[i] = expf(x[i]);
}
