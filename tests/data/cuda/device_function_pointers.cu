// Device function pointers: a `__device__` table of activation/op function pointers, pointers selected at run time, passed to kernels, and host-obtained via a device symbol.
#include <cuda_runtime.h>

typedef float (*UnaryFn)(float);
typedef float (*BinaryFn)(float, float);

__device__ float relu(float x) { return x > 0.f ? x : 0.f; }
__device__ float leaky(float x) { return x > 0.f ? x : 0.01f * x; }
__device__ float sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }
__device__ float tanh_fn(float x) { return tanhf(x); }
__device__ float softsign(float x) { return x / (1.f + fabsf(x)); }
__device__ float elu(float x) { return x > 0.f ? x : expm1f(x); }

__device__ float op_add(float a, float b) { return a + b; }
__device__ float op_mul(float a, float b) { return a * b; }
__device__ float op_max(float a, float b) { return fmaxf(a, b); }
__device__ float op_hypot(float a, float b) { return hypotf(a, b); }

// The tables live in device memory; the host copies an entry out with cudaMemcpyFromSymbol to pass
// a function pointer as a kernel argument.
__device__ UnaryFn g_activations[] = {relu, leaky, sigmoid, tanh_fn, softsign, elu};
__device__ BinaryFn g_binary_ops[] = {op_add, op_mul, op_max, op_hypot};
__device__ UnaryFn g_default_activation = sigmoid;

// Per-layer activation chosen by index into the table.
__global__ void apply_activation_by_index(float* __restrict__ x, int n, const int* __restrict__ layer_act, int layer) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const UnaryFn f = g_activations[layer_act[layer] % 6];
  x[i] = f(x[i]);
}

// Function pointer passed as a kernel parameter.
__global__ void apply_activation_ptr(float* __restrict__ x, int n, UnaryFn f) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = (f ? f : g_default_activation)(x[i]);
}

// A tiny stack-machine interpreter dispatching through both tables (divergent indirect calls).
struct Instr {
  int kind;  // 0: push const, 1: unary, 2: binary, 3: load input
  int op;
  float imm;
};

__global__ void interpret(const Instr* __restrict__ prog, int len, const float* __restrict__ in, float* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float stack[16];
  int sp = 0;
  for (int pc = 0; pc < len; ++pc) {
    const Instr ins = prog[pc];
    switch (ins.kind) {
      case 0: if (sp < 16) stack[sp++] = ins.imm; break;
      case 1: if (sp > 0) stack[sp - 1] = g_activations[ins.op % 6](stack[sp - 1]); break;
      case 2:
        if (sp > 1) {
          stack[sp - 2] = g_binary_ops[ins.op & 3](stack[sp - 2], stack[sp - 1]);
          --sp;
        }
        break;
      default: if (sp < 16) stack[sp++] = in[i * 4 + (ins.op & 3)]; break;
    }
  }
  out[i] = sp > 0 ? stack[sp - 1] : 0.f;
}

// Template taking a callable (device lambda-free, plain pointer) to mimic thrust-style dispatch.
template <typename F>
__device__ float fold(const float* v, int n, F f, float init) {
  for (int k = 0; k < n; ++k) init = f(init, v[k]);
  return init;
}

__global__ void fold_rows(const float* __restrict__ m, int cols, float* __restrict__ out, int op) {
  const BinaryFn f = g_binary_ops[op & 3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = fold(m + size_t(blockIdx.x * blockDim.x + threadIdx.x) * cols, cols, f, 0.f);
}
