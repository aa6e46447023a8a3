// Reduction operators, the way a library spreads them over a header tree.
#pragma once
#include "detail/vec.cuh"

namespace ops {
template <typename T>
struct Sum {
  __device__ static T identity() { return T(0); }
  __device__ T operator()(T a, T b) const { return a + b; }
};

template <typename T>
struct Max {
  __device__ static T identity() { return -detail::big<T>(); }
  __device__ T operator()(T a, T b) const { return a > b ? a : b; }
};
}  // namespace ops
