// Inline PTX on sm_90 that needs a PTX ISA newer than sm_90's minimum 7.8: `elect.sync` (8.0), `st.async`/`red.async` (8.1), `fma.rn.oob` (8.1), with `griddepcontrol` and `stmatrix` (7.8).
#include <cuda_fp16.h>
#include <cstdint>

__device__ __forceinline__ bool elect_one() {
  uint32_t is_elected;
  asm volatile("{\n\t.reg .pred p;\n\t.reg .b32 leader;\n\telect.sync leader|p, 0xffffffff;\n\tselp.u32 %0, 1, 0, p;\n\t}\n"
               : "=r"(is_elected));
  return is_elected != 0;
}

// Programmatic dependent launch: the kernel lets the next kernel in the stream start its prologue
// early (launch_dependents) and waits for its own predecessor's results (wait) before reading them.
__global__ void pdl_layernorm_residual(const float* __restrict__ x, const float* __restrict__ residual, float* __restrict__ y,
                                       int cols, float eps) {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  const float* xr = x + size_t(blockIdx.x) * cols;
  const float* rr = residual + size_t(blockIdx.x) * cols;
  __shared__ float s_mean, s_rstd;
  __shared__ float red[32];
  float sum = 0.f, sq = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = xr[c] + rr[c];
    sum += v;
    sq += v * v;
  }
  for (int off = 16; off > 0; off >>= 1) {
    sum += __shfl_xor_sync(0xffffffffu, sum, off);
    sq += __shfl_xor_sync(0xffffffffu, sq, off);
  }
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int w = 0; w < int(blockDim.x / 32); ++w) t += red[w];
    s_mean = t / cols;
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = sq;
  __syncthreads();
  if (threadIdx.x == 0) {
    float t = 0.f;
    for (int w = 0; w < int(blockDim.x / 32); ++w) t += red[w];
    s_rstd = rsqrtf(t / cols - s_mean * s_mean + eps);
  }
  __syncthreads();
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  for (int c = threadIdx.x; c < cols; c += blockDim.x) y[size_t(blockIdx.x) * cols + c] = (xr[c] + rr[c] - s_mean) * s_rstd;
}

// One elected lane per warp publishes the warp's result to the cluster's rank-0 block with st.async
// and counts it with red.async, both completing on rank 0's mbarrier (complete_tx).
__global__ void __launch_bounds__(128) elect_publish(const float* __restrict__ in, float* __restrict__ out) {
  __shared__ __align__(8) uint64_t bar;
  __shared__ float inbox[4 * 8];
  __shared__ uint32_t count;
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  if (threadIdx.x == 0) {
    count = 0;
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(uint32_t(__cvta_generic_to_shared(&bar))));
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  float v = in[blockIdx.x * blockDim.x + threadIdx.x];
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  if (elect_one()) {
    uint32_t dst, dst_bar, dst_cnt;
    const uint32_t warp = threadIdx.x / 32;
    asm volatile("mapa.shared::cluster.u32 %0, %1, 0;\n" : "=r"(dst) : "r"(uint32_t(__cvta_generic_to_shared(&inbox[rank * 4 + warp]))));
    asm volatile("mapa.shared::cluster.u32 %0, %1, 0;\n" : "=r"(dst_bar) : "r"(uint32_t(__cvta_generic_to_shared(&bar))));
    asm volatile("mapa.shared::cluster.u32 %0, %1, 0;\n" : "=r"(dst_cnt) : "r"(uint32_t(__cvta_generic_to_shared(&count))));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];\n" ::"r"(dst), "f"(v), "r"(dst_bar)
                 : "memory");
    asm volatile("red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.add.u32 [%0], 1, [%1];\n" ::"r"(dst_cnt),
                 "r"(dst_bar)
                 : "memory");
  }
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  if (rank == 0 && threadIdx.x < 32) out[blockIdx.x * 32 + threadIdx.x] = inbox[threadIdx.x] + float(count);
}

// fma.rn.oob (PTX 8.1): out-of-bounds-aware half2 FMA (zeroes results whose inputs are OOB NaN markers),
// and stmatrix (PTX 7.8) writing the accumulator fragment to shared memory.
__global__ void fma_oob_stmatrix(const __half2* __restrict__ a, const __half2* __restrict__ b, const __half2* __restrict__ c,
                                 __half2* __restrict__ out) {
  __shared__ __align__(16) __half2 tile[4][8 * 8 / 2 * 2];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  uint32_t r;
  const uint32_t ra = reinterpret_cast<const uint32_t&>(a[i]);
  const uint32_t rb = reinterpret_cast<const uint32_t&>(b[i]);
  const uint32_t rc = reinterpret_cast<const uint32_t&>(c[i]);
  asm("fma.rn.oob.relu.f16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(ra), "r"(rb), "r"(rc));
  const int warp = (threadIdx.x / 32) & 3, lane = threadIdx.x % 32;
  const uint32_t row_addr = static_cast<uint32_t>(__cvta_generic_to_shared(&tile[warp][(lane % 8) * 4]));
  asm volatile("stmatrix.sync.aligned.m8n8.x1.shared.b16 [%0], {%1};\n" ::"r"(row_addr), "r"(r) : "memory");
  __syncwarp();
  out[i] = tile[warp][lane];
}
