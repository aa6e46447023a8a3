#include "launcher/kernels.hpp"

// Host-only code under #ifndef __CUDA_ARCH__: the device passes never see it, so a cache keyed by
// a device pass's preprocessed text would miss a change here (tests/integration/launcher_test.cpp
// changes this string and expects the rebuilt program to print the new one).
#ifndef __CUDA_ARCH__
const char* fixture::banner() { return "fixture banner v1"; }
#endif

__global__ void banner_kernel(int* flag) { *flag = 1; }
