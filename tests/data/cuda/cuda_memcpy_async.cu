// libcu++ asynchronous copies: `cuda::memcpy_async` with `cuda::pipeline` (thread and block scope) and `cuda::barrier`, shared state in raw storage for clang.
#include <cuda/pipeline>
#include <cuda/barrier>
#include <cooperative_groups.h>
#include <new>

namespace cg = cooperative_groups;

// clang rejects `__shared__` variables with non-trivial constructors (nvcc only warns), so the
// libcu++ shared-state objects live in raw shared storage and are constructed by one thread.
template <typename T>
struct alignas(alignof(T)) SharedRaw {
  unsigned char bytes[sizeof(T)];
  __device__ T& get() { return *reinterpret_cast<T*>(bytes); }
};

// Per-thread pipeline (thread_scope_thread needs no shared state): double-buffered axpy.
__global__ void axpy_thread_pipeline(const float* __restrict__ x, float* __restrict__ y, float a, int tiles) {
  __shared__ float sx[2][256];
  cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
  const size_t base = size_t(blockIdx.x) * tiles * blockDim.x;
  pipe.producer_acquire();
  cuda::memcpy_async(&sx[0][threadIdx.x], x + base + threadIdx.x, sizeof(float), pipe);
  pipe.producer_commit();
  for (int t = 0; t < tiles; ++t) {
    if (t + 1 < tiles) {
      pipe.producer_acquire();
      cuda::memcpy_async(&sx[(t + 1) & 1][threadIdx.x], x + base + size_t(t + 1) * blockDim.x + threadIdx.x, sizeof(float), pipe);
      pipe.producer_commit();
    }
    cuda::pipeline_consumer_wait_prior<1>(pipe);
    y[base + size_t(t) * blockDim.x + threadIdx.x] += a * sx[t & 1][threadIdx.x];
    pipe.consumer_release();
  }
}

// Block-scope pipeline with 2 stages: the whole block cooperatively copies tiles (cg overload).
__global__ void block_pipeline_sum(const float4* __restrict__ in, float* __restrict__ out, int tiles) {
  constexpr int kStages = 2;
  __shared__ __align__(16) float4 buf[kStages][128];
  using State = cuda::pipeline_shared_state<cuda::thread_scope_block, kStages>;
  __shared__ SharedRaw<State> state;
  auto block = cg::this_thread_block();
  if (block.thread_rank() == 0) new (&state.get()) State();
  block.sync();
  auto pipe = cuda::make_pipeline(block, &state.get());
  const size_t base = size_t(blockIdx.x) * tiles * 128;
  int fetched = 0;
  for (; fetched < kStages && fetched < tiles; ++fetched) {
    pipe.producer_acquire();
    cuda::memcpy_async(block, buf[fetched % kStages], in + base + size_t(fetched) * 128, cuda::aligned_size_t<16>(sizeof(float4) * 128), pipe);
    pipe.producer_commit();
  }
  float acc = 0.f;
  for (int t = 0; t < tiles; ++t) {
    pipe.consumer_wait();
    const float4 v = buf[t % kStages][threadIdx.x % 128];
    acc += v.x + v.y + v.z + v.w;
    pipe.consumer_release();
    if (fetched < tiles) {
      pipe.producer_acquire();
      cuda::memcpy_async(block, buf[fetched % kStages], in + base + size_t(fetched) * 128, cuda::aligned_size_t<16>(sizeof(float4) * 128), pipe);
      pipe.producer_commit();
      ++fetched;
    }
  }
  atomicAdd(out, acc);
}

// cuda::barrier completion of a block-wide memcpy_async, then arrive/wait phases.
__global__ void barrier_copy_scale(const double* __restrict__ in, double* __restrict__ out, int n_per_block, double s) {
  extern __shared__ __align__(16) double sdata[];
  using Barrier = cuda::barrier<cuda::thread_scope_block>;
  __shared__ SharedRaw<Barrier> bar_storage;
  Barrier& bar = bar_storage.get();
  auto block = cg::this_thread_block();
  if (block.thread_rank() == 0) init(&bar, block.size());
  block.sync();
  cuda::memcpy_async(block, sdata, in + size_t(blockIdx.x) * n_per_block, sizeof(double) * n_per_block, bar);
  bar.arrive_and_wait();
  for (int i = threadIdx.x; i < n_per_block; i += blockDim.x) sdata[i] *= s;
  auto token = bar.arrive();
  bar.wait(std::move(token));
  for (int i = threadIdx.x; i < n_per_block; i += blockDim.x) out[size_t(blockIdx.x) * n_per_block + i] = sdata[i] + sdata[(i + 1) % n_per_block];
}
