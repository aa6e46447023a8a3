// A translation unit of the kind CUDA projects compile most often: Thrust's sort and reduce on
// device vectors and CUB's device-wide sum, with a functor and an extended lambda. Nearly all of
// its code is the toolkit's own headers (for bench/launcher.py).
#include <cub/device/device_reduce.cuh>
#include <thrust/count.h>
#include <thrust/device_vector.h>
#include <thrust/reduce.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include <cstdio>

struct Square {
  __host__ __device__ float operator()(float x) const { return x * x; }
};

float sum_of_squares_sorted(const float* host, int n) {
  thrust::device_vector<float> v(host, host + n);
  thrust::sort(v.begin(), v.end());
  thrust::transform(v.begin(), v.end(), v.begin(), Square());
  return thrust::reduce(v.begin(), v.end(), 0.0f);
}

float cub_sum(const float* device_in, float* device_out, int n) {
  void* scratch = nullptr;
  size_t bytes = 0;
  cub::DeviceReduce::Sum(scratch, bytes, device_in, device_out, n);
  cudaMalloc(&scratch, bytes);
  cub::DeviceReduce::Sum(scratch, bytes, device_in, device_out, n);
  cudaFree(scratch);
  float out = 0;
  cudaMemcpy(&out, device_out, sizeof out, cudaMemcpyDeviceToHost);
  return out;
}

int count_positive(const thrust::device_vector<int>& v) {
  return static_cast<int>(thrust::count_if(v.begin(), v.end(), [] __device__(int x) { return x > 0; }));
}
