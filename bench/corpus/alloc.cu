// The CUDA source counterpart of tests/data/kernels/alloc.ll (device malloc/free).
__global__ void scratch(char *out, unsigned long n) {
  volatile char *buf = (volatile char *)malloc(n);
  if (buf == nullptr) {
    *out = 0;
    return;
  }
  buf[0] = 7;
  *out = buf[0];
  free((void *)buf);
}
