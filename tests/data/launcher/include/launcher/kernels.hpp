// The host entry points of the fixture's kernels (no CUDA in this header).
#pragma once
#include <cstddef>

namespace fixture {
void saxpy(float a, const float* x, float* y, std::size_t n);
void reduce(const float* in, float* out, std::size_t n);
void scan(const int* in, int* out, std::size_t n);
void transpose(const float* in, float* out, int rows, int cols);
void histogram(const unsigned char* in, unsigned* bins, std::size_t n);
void stencil(const float* in, float* out, std::size_t n);
void softmax(const float* in, float* out, int rows, int cols);
void matmul(const float* a, const float* b, float* c, int n);
void rdc_apply(float* data, std::size_t n);
const char* banner();
const char* build_note();
}  // namespace fixture
