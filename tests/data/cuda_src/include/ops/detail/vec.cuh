#pragma once
#include <cuda_fp16.h>

namespace ops::detail {
template <typename T> __device__ T big() { return T(3.0e38f); }
template <> __device__ inline __half big<__half>() { return __float2half(65504.0f); }
}  // namespace ops::detail
