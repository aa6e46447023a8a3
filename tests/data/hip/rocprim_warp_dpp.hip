// rocPRIM-style warp primitives: templated warp scan/reduce over DPP row ops (__builtin_amdgcn_update_dpp),
// ds_swizzle, ds_bpermute and readlane, with the wave32/wave64 split rocPRIM makes on warpSize.
#include <hip/hip_runtime.h>
#include <type_traits>

namespace detail {
// DPP controls (rocPRIM's warp_scan_dpp): row_shr:1/2/4/8, row_bcast:15 and row_bcast:31 (wave64 only).
template <int Ctrl, int RowMask = 0xf, int BankMask = 0xf, bool BoundCtrl = false>
__device__ inline int dpp_i32(int v) {
  return __builtin_amdgcn_update_dpp(0, v, Ctrl, RowMask, BankMask, BoundCtrl);
}
template <int Ctrl, int RowMask = 0xf, int BankMask = 0xf, bool BoundCtrl = false>
__device__ inline float dpp_f32(float v) {
  return __int_as_float(__builtin_amdgcn_update_dpp(0, __float_as_int(v), Ctrl, RowMask, BankMask, BoundCtrl));
}

}  // namespace detail

// Inclusive scan within a wave using DPP shifts (rows of 16), then cross-row via readlane.
template <typename T>
__device__ T warp_inclusive_scan_dpp(T v) {
  static_assert(sizeof(T) == 4, "32-bit types only");
  const unsigned int lane = __lane_id();
  const unsigned int row_lane = lane & 15;
  auto shr = [](T x, auto ctrl) -> T {
    if constexpr (std::is_same<T, float>::value) return detail::dpp_f32<decltype(ctrl)::value>(x);
    else return static_cast<T>(detail::dpp_i32<decltype(ctrl)::value>(static_cast<int>(x)));
  };
  T t;
  t = shr(v, std::integral_constant<int, 0x111>{});  // row_shr:1
  if (row_lane >= 1) v += t;
  t = shr(v, std::integral_constant<int, 0x112>{});  // row_shr:2
  if (row_lane >= 2) v += t;
  t = shr(v, std::integral_constant<int, 0x114>{});  // row_shr:4
  if (row_lane >= 4) v += t;
  t = shr(v, std::integral_constant<int, 0x118>{});  // row_shr:8
  if (row_lane >= 8) v += t;
  // Combine rows: add the last lane of every earlier row (readlane is uniform, no DPP row_bcast needed).
  T carry = T(0);
  for (int row = 0; row < warpSize / 16; ++row) {
    T row_total;
    if constexpr (std::is_same<T, float>::value)
      row_total = __int_as_float(__builtin_amdgcn_readlane(__float_as_int(v), row * 16 + 15));
    else
      row_total = static_cast<T>(__builtin_amdgcn_readlane(static_cast<int>(v), row * 16 + 15));
    if (static_cast<int>(lane / 16) > row) carry += row_total;
  }
  return v + carry;
}

// Butterfly reduction with ds_swizzle inside groups of 32 (the swizzle offset's xor_mask mode),
// then ds_bpermute to cross the 32-lane halves on wave64.
__device__ inline int warp_reduce_swizzle(int v) {
  v += __builtin_amdgcn_ds_swizzle(v, 0x041f);  // xor 1
  v += __builtin_amdgcn_ds_swizzle(v, 0x081f);  // xor 2
  v += __builtin_amdgcn_ds_swizzle(v, 0x101f);  // xor 4
  v += __builtin_amdgcn_ds_swizzle(v, 0x201f);  // xor 8
  v += __builtin_amdgcn_ds_swizzle(v, 0x401f);  // xor 16
  if (warpSize == 64) {
    const int src = (__lane_id() ^ 32) << 2;
    v += __builtin_amdgcn_ds_bpermute(src, v);
  }
  return v;
}

template <typename T, unsigned int BlockSize>
__global__ void __launch_bounds__(BlockSize) block_scan_dpp(const T* __restrict__ in, T* __restrict__ out,
                                                            unsigned int n) {
  __shared__ T wave_totals[BlockSize / 32];
  const unsigned int gid = blockIdx.x * BlockSize + threadIdx.x;
  const unsigned int wid = threadIdx.x / warpSize;
  const unsigned int nwaves = BlockSize / warpSize;
  T v = gid < n ? in[gid] : T(0);
  v = warp_inclusive_scan_dpp(v);
  if (__lane_id() == static_cast<unsigned int>(warpSize - 1)) wave_totals[wid] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    T run = T(0);
    for (unsigned int w = 0; w < nwaves; ++w) {
      const T x = wave_totals[w];
      wave_totals[w] = run;
      run += x;
    }
  }
  __syncthreads();
  if (gid < n) out[gid] = v + wave_totals[wid];
}

template __global__ void block_scan_dpp<int, 256>(const int*, int*, unsigned int);
template __global__ void block_scan_dpp<unsigned int, 256>(const unsigned int*, unsigned int*, unsigned int);
template __global__ void block_scan_dpp<float, 128>(const float*, float*, unsigned int);
template __global__ void block_scan_dpp<float, 1024>(const float*, float*, unsigned int);

__global__ void count_flags_swizzle(const int* __restrict__ flags, int* __restrict__ per_wave, int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  const int total = warp_reduce_swizzle(gid < n ? (flags[gid] != 0) : 0);
  if (__lane_id() == 0) per_wave[gid / warpSize] = total;
}

// Radix-sort digit histogram: per-wave match via ballot on each of 16 digit values (4-bit pass).
__global__ void radix_digit_counts(const unsigned int* __restrict__ keys, unsigned int* __restrict__ counts, int shift,
                                   int n) {
  __shared__ unsigned int block_counts[16];
  if (threadIdx.x < 16) block_counts[threadIdx.x] = 0;
  __syncthreads();
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  const unsigned int digit = gid < n ? (keys[gid] >> shift) & 15u : 16u;
  for (unsigned int d = 0; d < 16; ++d) {
    const unsigned long long m = __ballot(digit == d);
    if (__lane_id() == 0 && m) atomicAdd(&block_counts[d], static_cast<unsigned int>(__popcll(m)));
  }
  __syncthreads();
  if (threadIdx.x < 16) atomicAdd(&counts[threadIdx.x * gridDim.x + blockIdx.x], block_counts[threadIdx.x]);
}
