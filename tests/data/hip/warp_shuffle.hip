// Wavefront shuffles: __shfl broadcast, __shfl_up inclusive scan, __shfl_down reduction and
// __shfl_xor butterfly, written against warpSize so they hold on wave64 (gfx9) and wave32 (gfx10/11).
#include <hip/hip_runtime.h>

template <typename T>
__device__ inline T wave_reduce_sum(T v) {
  for (int offset = warpSize / 2; offset > 0; offset >>= 1) v += __shfl_down(v, offset, warpSize);
  return v;  // valid in lane 0
}

template <typename T>
__device__ inline T wave_allreduce_max(T v) {
  for (int mask = warpSize / 2; mask > 0; mask >>= 1) v = max(v, __shfl_xor(v, mask, warpSize));
  return v;  // valid in every lane
}

template <typename T>
__device__ inline T wave_inclusive_scan(T v) {
  const int lane = __lane_id();
  for (int offset = 1; offset < warpSize; offset <<= 1) {
    const T up = __shfl_up(v, offset, warpSize);
    if (lane >= offset) v += up;
  }
  return v;
}

// Block reduction: each wave reduces with shuffles, wave totals go through LDS, the first wave
// reduces those. Sized for the worst case of 1024 threads / 32 lanes.
template <typename T>
__global__ void block_reduce_shfl(const T* __restrict__ in, T* __restrict__ out, int n) {
  __shared__ T wave_sums[1024 / 32];
  const int lane = threadIdx.x % warpSize;
  const int wid = threadIdx.x / warpSize;
  const int nwaves = (blockDim.x + warpSize - 1) / warpSize;

  T v = T(0);
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += in[i];
  v = wave_reduce_sum(v);
  if (lane == 0) wave_sums[wid] = v;
  __syncthreads();
  if (wid == 0) {
    v = lane < nwaves ? wave_sums[lane] : T(0);
    v = wave_reduce_sum(v);
    if (lane == 0) out[blockIdx.x] = v;
  }
}

template __global__ void block_reduce_shfl<float>(const float*, float*, int);
template __global__ void block_reduce_shfl<double>(const double*, double*, int);
template __global__ void block_reduce_shfl<int>(const int*, int*, int);

__global__ void wave_scan_i32(const int* __restrict__ in, int* __restrict__ out, int* __restrict__ wave_totals, int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  int v = gid < n ? in[gid] : 0;
  v = wave_inclusive_scan(v);
  if (gid < n) out[gid] = v;
  // Last lane holds the wave's total: broadcast it to every lane with __shfl.
  const int total = __shfl(v, warpSize - 1, warpSize);
  if (__lane_id() == 0) wave_totals[gid / warpSize] = total;
}

// Sub-wave groups of 8 lanes (width argument): segmented max, then a broadcast of lane 0 of each group.
__global__ void segmented8_max(const float* __restrict__ in, float* __restrict__ out, int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  float v = gid < n ? in[gid] : -INFINITY;
  for (int mask = 4; mask > 0; mask >>= 1) v = fmaxf(v, __shfl_xor(v, mask, 8));
  const float first = __shfl(in[min(gid, n - 1)], 0, 8);
  if (gid < n) out[gid] = v - first;
}

// Double and 64-bit shuffles split into two 32-bit ds_bpermute's by the headers.
__global__ void wave_max_f64_u64(const double* __restrict__ a, const unsigned long long* __restrict__ b,
                                 double* __restrict__ amax, unsigned long long* __restrict__ bsum, int n) {
  const int gid = blockIdx.x * blockDim.x + threadIdx.x;
  double x = gid < n ? a[gid] : -HUGE_VAL;
  unsigned long long y = gid < n ? b[gid] : 0ull;
  x = wave_allreduce_max(x);
  y = wave_reduce_sum(y);
  if (__lane_id() == 0) {
    amax[gid / warpSize] = x;
    bsum[gid / warpSize] = y;
  }
}
