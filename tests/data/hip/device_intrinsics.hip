// Device intrinsics and globals: __constant__ tables, __device__ globals, bit ops (__clz, __popc,
// __ffs, __brev, __byte_perm), __mul24/__umulhi, clock64/wall_clock64, __smid, s_sleep, __builtin_amdgcn_* ids.
#include <hip/hip_runtime.h>

__constant__ float c_filter[9] = {1 / 16.f, 2 / 16.f, 1 / 16.f, 2 / 16.f, 4 / 16.f, 2 / 16.f, 1 / 16.f, 2 / 16.f, 1 / 16.f};
__constant__ unsigned int c_crc_table[256];
__device__ unsigned long long g_cycles_total;
__device__ int g_error_code = 0;

__global__ void conv3x3_constant(const float* __restrict__ src, float* __restrict__ dst, int w, int h) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x <= 0 || y <= 0 || x >= w - 1 || y >= h - 1) return;
  float s = 0.0f;
#pragma unroll
  for (int dy = -1; dy <= 1; ++dy)
#pragma unroll
    for (int dx = -1; dx <= 1; ++dx) s += c_filter[(dy + 1) * 3 + dx + 1] * src[(y + dy) * w + x + dx];
  dst[y * w + x] = s;
}

__global__ void crc32_blocks(const unsigned char* __restrict__ data, unsigned int* __restrict__ crcs, int block_len,
                             int nblocks) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= nblocks) return;
  unsigned int crc = 0xffffffffu;
  for (int i = 0; i < block_len; ++i) crc = c_crc_table[(crc ^ data[b * block_len + i]) & 0xff] ^ (crc >> 8);
  crcs[b] = ~crc;
}

__global__ void bit_tricks(const unsigned int* __restrict__ in, const unsigned long long* __restrict__ in64,
                           unsigned int* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const unsigned int v = in[i];
  const unsigned long long w = in64[i];
  out[8 * i + 0] = __clz(v) + __clzll(w);
  out[8 * i + 1] = __popc(v) + __popcll(w);
  out[8 * i + 2] = __ffs(v) + __ffsll(w);
  out[8 * i + 3] = __brev(v);
  out[8 * i + 4] = __byte_perm(v, ~v, 0x3210 ^ (i & 0x7777));
  out[8 * i + 5] = __mul24(static_cast<int>(v & 0xffffff), 3) + __umul24(v, 5u);
  out[8 * i + 6] = __umulhi(v, 0x9e3779b9u) ^ static_cast<unsigned int>(__umul64hi(w, 0x9e3779b97f4a7c15ull));
  out[8 * i + 7] = __bitinsert_u32(v, 0xffu, 8, 4) + __bitextract_u32(v, 4, 12);
}

// Timing instrumentation: per-block cycle counts accumulated into a __device__ global.
__global__ void timed_spin(int* __restrict__ where, int spins) {
  const long long t0 = clock64();
  const unsigned long long w0 = wall_clock64();
  for (int s = 0; s < spins; ++s) __builtin_amdgcn_s_sleep(1);
  const long long t1 = clock64();
  if (threadIdx.x == 0) {
    atomicAdd(&g_cycles_total, static_cast<unsigned long long>(t1 - t0));
    where[3 * blockIdx.x + 0] = static_cast<int>(__smid());
    where[3 * blockIdx.x + 1] = static_cast<int>(wall_clock64() - w0);
    where[3 * blockIdx.x + 2] = __builtin_amdgcn_workgroup_id_x() + __builtin_amdgcn_workitem_id_x();
  }
  if (spins < 0) atomicExch(&g_error_code, 1);
}
