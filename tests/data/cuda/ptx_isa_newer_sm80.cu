// Inline PTX on sm_80 that needs a PTX ISA newer than sm_80's minimum 7.0: `createpolicy` and `.L2::cache_hint` (7.4), `discard.global.L2` (7.4), `mbarrier.test_wait.parity` (7.1), `fence.proxy.alias` (7.5).
#include <cstdint>

// L2 cache-policy objects (PTX 7.4+): keep the reused operand resident, stream the other.
__device__ __forceinline__ uint64_t policy_evict_last(float fraction) {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, %1;\n" : "=l"(p) : "f"(fraction));
  return p;
}
__device__ __forceinline__ uint64_t policy_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.L2::evict_unchanged.b64 %0, 1.0;\n" : "=l"(p));
  return p;
}
__device__ __forceinline__ float4 ld_hint(const float4* ptr, uint64_t pol) {
  float4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.f32 {%0,%1,%2,%3}, [%4], %5;\n"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "l"(ptr), "l"(pol));
  return v;
}
__device__ __forceinline__ void st_hint(float4* ptr, float4 v, uint64_t pol) {
  asm volatile("st.global.L1::no_allocate.L2::cache_hint.v4.f32 [%0], {%1,%2,%3,%4}, %5;\n" ::"l"(ptr), "f"(v.x), "f"(v.y),
               "f"(v.z), "f"(v.w), "l"(pol)
               : "memory");
}
__device__ __forceinline__ float ld_l2_256b(const float* ptr) {
  float v;
  asm volatile("ld.global.L2::256B.f32 %0, [%1];\n" : "=f"(v) : "l"(ptr));
  return v;
}

// Embedding-bag style kernel: the embedding table is re-read (evict_last), the indices and output
// are streamed (evict_first), and the scratch buffer is discarded from L2 once consumed.
__global__ void embedding_bag_l2_hints(const float4* __restrict__ table, const int* __restrict__ idx, const int* __restrict__ offsets,
                                       int dim4, float4* __restrict__ out, float* __restrict__ scratch) {
  const uint64_t keep = policy_evict_last(0.5f);
  const uint64_t stream = policy_evict_first();
  const int bag = blockIdx.x;
  const int begin = offsets[bag], end = offsets[bag + 1];
  for (int d = threadIdx.x; d < dim4; d += blockDim.x) {
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int j = begin; j < end; ++j) {
      const float4 v = ld_hint(table + size_t(idx[j]) * dim4 + d, keep);
      acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
    st_hint(out + size_t(bag) * dim4 + d, acc, stream);
  }
  __syncthreads();
  // scratch is 128-byte aligned per block: drop its L2 lines without writing them back.
  if (threadIdx.x == 0) {
    const float first = ld_l2_256b(scratch + size_t(bag) * 32);
    out[bag].x += first * 0.f;
    asm volatile("discard.global.L2 [%0], 128;\n" ::"l"(scratch + size_t(bag) * 32) : "memory");
    asm volatile("applypriority.global.L2::evict_normal [%0], 128;\n" ::"l"(table) : "memory");
  }
}

// mbarrier phase waits with explicit parity (PTX 7.1) over a 2-slot shared ring, and the
// proxy fence for aliased (generic vs. shared) accesses (PTX 7.5).
__global__ void mbarrier_parity_ring(const int* __restrict__ in, int* __restrict__ out, int rounds) {
  __shared__ __align__(8) uint64_t bars[2];
  __shared__ int slot[2][128];
  const uint32_t b0 = static_cast<uint32_t>(__cvta_generic_to_shared(&bars[0]));
  if (threadIdx.x == 0) {
    asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(b0), "r"(blockDim.x));
    asm volatile("mbarrier.init.shared.b64 [%0], %1;\n" ::"r"(b0 + 8), "r"(blockDim.x));
  }
  __syncthreads();
  int acc = 0;
  for (int r = 0; r < rounds; ++r) {
    const int s = r & 1;
    slot[s][threadIdx.x] = in[r * blockDim.x + threadIdx.x];
    asm volatile("fence.proxy.alias;\n" ::: "memory");
    asm volatile("{\n\t.reg .b64 state;\n\tmbarrier.arrive.shared.b64 state, [%0];\n\t}\n" ::"r"(b0 + 8 * s) : "memory");
    const uint32_t parity = (r >> 1) & 1;
    uint32_t done = 0;
    while (!done) {
      asm volatile("{\n\t.reg .pred p;\n\tmbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}\n"
                   : "=r"(done)
                   : "r"(b0 + 8 * s), "r"(parity)
                   : "memory");
    }
    acc += slot[s][(threadIdx.x + 1) % blockDim.x];
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
