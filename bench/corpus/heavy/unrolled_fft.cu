// Register FFTs written the way FFT libraries' generated kernels are: each thread holds N complex
// points and runs every radix-2 stage fully unrolled (log2(N) stages of N/2 butterflies), with
// twiddles from constant tables, then a transposition through shared memory between threads.
// Five sizes, five kernels of thousands of straight-line instructions each.
#include <cuda_runtime.h>

namespace {

struct Complex {
  float re, im;
};

__device__ __forceinline__ Complex mul(Complex a, Complex b) { return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re}; }
__device__ __forceinline__ Complex add(Complex a, Complex b) { return {a.re + b.re, a.im + b.im}; }
__device__ __forceinline__ Complex sub(Complex a, Complex b) { return {a.re - b.re, a.im - b.im}; }

template <int N>
__device__ __forceinline__ void fft_in_registers(Complex (&x)[N]) {
  // Bit-reversal, unrolled.
#pragma unroll
  for (int i = 0; i < N; ++i) {
    int r = 0;
#pragma unroll
    for (int b = 1, v = i; b < N; b <<= 1, v >>= 1) r = (r << 1) | (v & 1);
    if (r > i) {
      Complex t = x[i];
      x[i] = x[r];
      x[r] = t;
    }
  }
#pragma unroll
  for (int half = 1; half < N; half <<= 1) {
#pragma unroll
    for (int start = 0; start < N; start += 2 * half) {
#pragma unroll
      for (int j = 0; j < half; ++j) {
        float angle = -3.14159265358979f * j / half;
        Complex w = {__cosf(angle), __sinf(angle)};
        Complex t = mul(w, x[start + j + half]);
        x[start + j + half] = sub(x[start + j], t);
        x[start + j] = add(x[start + j], t);
      }
    }
  }
}

template <int N>
__device__ void fft_batch(const Complex* __restrict__ in, Complex* __restrict__ out, int batches, float scale) {
  __shared__ Complex exchange[64 * 16 + 16];
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batches) return;
  Complex x[N];
#pragma unroll
  for (int i = 0; i < N; ++i) x[i] = in[(size_t)b * N + i];
  fft_in_registers<N>(x);
  // A transposition step through shared memory, as a two-level FFT does between its passes.
#pragma unroll
  for (int i = 0; i < N && i < 16; ++i) exchange[threadIdx.x * 16 + i] = x[i];
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N && i < 16; ++i) x[i] = add(x[i], exchange[((threadIdx.x + i) % blockDim.x) * 16 + i]);
  fft_in_registers<N>(x);
#pragma unroll
  for (int i = 0; i < N; ++i) out[(size_t)b * N + i] = {x[i].re * scale, x[i].im * scale};
}

}  // namespace

extern "C" __global__ void __launch_bounds__(64) fft16(const Complex* in, Complex* out, int batches, float scale) {
  fft_batch<16>(in, out, batches, scale);
}
extern "C" __global__ void __launch_bounds__(64) fft32(const Complex* in, Complex* out, int batches, float scale) {
  fft_batch<32>(in, out, batches, scale);
}
extern "C" __global__ void __launch_bounds__(64) fft64(const Complex* in, Complex* out, int batches, float scale) {
  fft_batch<64>(in, out, batches, scale);
}
extern "C" __global__ void __launch_bounds__(64) fft128(const Complex* in, Complex* out, int batches, float scale) {
  fft_batch<128>(in, out, batches, scale);
}
extern "C" __global__ void __launch_bounds__(64) fft256(const Complex* in, Complex* out, int batches, float scale) {
  fft_batch<256>(in, out, batches, scale);
}
