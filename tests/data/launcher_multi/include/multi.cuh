#pragma once
#include <cstddef>

// Device helpers shared by the library's files: called across translation units (relocatable
// device code), so each executable needs a device link.
__device__ float square(float v);
__device__ float fused(float a, float x, float y);

void saxpy(float a, const float* x, float* y, std::size_t n);
float sum_of_squares(const float* x, std::size_t n);
void report(const char* label, double value);
