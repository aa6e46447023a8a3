// The CUDA source counterpart of tests/data/kernels/throw.ll (printf + trap instead of rtlib).
#include <cstdio>
__global__ void checked_store(int *a, int n) {
  int i = threadIdx.x;
  if (i < n) {
    a[i] = i;
    return;
  }
  printf("ERROR: a %s was thrown during kernel execution on thread (%d, %d, %d)\n", "BoundsError", threadIdx.x,
         threadIdx.y, threadIdx.z);
  __trap();
}
