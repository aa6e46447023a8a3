#include <cstdio>
#include <cstring>

#include <cuda_runtime.h>

#include "launcher/kernels.hpp"

#ifndef FIXTURE_NOTE
#define FIXTURE_NOTE 0
#endif
#define FIXTURE_TEXT2(x) #x
#define FIXTURE_TEXT(x) FIXTURE_TEXT2(x)

const char* fixture::build_note() { return "note " FIXTURE_TEXT(FIXTURE_NOTE); }

// Prints the host part's answers; with --gpu (and a GPU), also runs a kernel.
int main(int argc, char** argv) {
  std::printf("%s\n%s\n", fixture::banner(), fixture::build_note());
  if (argc > 1 && std::strcmp(argv[1], "--gpu") == 0) {
    float* data = nullptr;
    if (cudaMalloc(&data, 1024 * sizeof(float)) != cudaSuccess) return 2;
    fixture::rdc_apply(data, 1024);
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : 3;
  }
  return 0;
}
