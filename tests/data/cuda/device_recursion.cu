// Device recursion (needs a call stack): recursive quicksort with insertion-sort cutoff, recursive BVH-style tree traversal, and mutually recursive expression evaluation.
#include <cstdint>

template <typename T>
__device__ void insertion_sort(T* a, int lo, int hi) {
  for (int i = lo + 1; i <= hi; ++i) {
    T v = a[i];
    int j = i - 1;
    while (j >= lo && a[j] > v) {
      a[j + 1] = a[j];
      --j;
    }
    a[j + 1] = v;
  }
}

template <typename T>
__device__ void quicksort(T* a, int lo, int hi, int depth) {
  if (hi - lo < 16 || depth > 48) {
    insertion_sort(a, lo, hi);
    return;
  }
  const T pivot = a[lo + (hi - lo) / 2];
  int i = lo, j = hi;
  while (i <= j) {
    while (a[i] < pivot) ++i;
    while (a[j] > pivot) --j;
    if (i <= j) {
      T t = a[i];
      a[i] = a[j];
      a[j] = t;
      ++i;
      --j;
    }
  }
  if (lo < j) quicksort(a, lo, j, depth + 1);
  if (i < hi) quicksort(a, i, hi, depth + 1);
}

// Each thread sorts its own segment (segmented sort of small independent lists).
__global__ void segmented_sort_f(float* __restrict__ data, const int* __restrict__ seg_off, int nseg) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s < nseg) quicksort(data, seg_off[s], seg_off[s + 1] - 1, 0);
}
__global__ void segmented_sort_u64(unsigned long long* __restrict__ data, const int* __restrict__ seg_off, int nseg) {
  const int s = blockIdx.x * blockDim.x + threadIdx.x;
  if (s < nseg) quicksort(data, seg_off[s], seg_off[s + 1] - 1, 0);
}

struct BvhNode {
  float3 lo, hi;
  int left, right;  // children, or -1
  int prim;         // leaf primitive, or -1
};

__device__ bool hit_box(const BvhNode& n, float3 o, float3 inv_d, float tmax) {
  float t0 = 0.f, t1 = tmax;
  const float lo[3] = {n.lo.x, n.lo.y, n.lo.z}, hi[3] = {n.hi.x, n.hi.y, n.hi.z};
  const float oo[3] = {o.x, o.y, o.z}, id[3] = {inv_d.x, inv_d.y, inv_d.z};
  for (int a = 0; a < 3; ++a) {
    float ta = (lo[a] - oo[a]) * id[a], tb = (hi[a] - oo[a]) * id[a];
    if (ta > tb) { float t = ta; ta = tb; tb = t; }
    t0 = fmaxf(t0, ta);
    t1 = fminf(t1, tb);
    if (t1 < t0) return false;
  }
  return true;
}

// Recursive traversal counting primitive candidates along a ray.
__device__ int traverse(const BvhNode* nodes, int idx, float3 o, float3 inv_d, float tmax) {
  const BvhNode& n = nodes[idx];
  if (!hit_box(n, o, inv_d, tmax)) return 0;
  if (n.prim >= 0) return 1;
  int c = 0;
  if (n.left >= 0) c += traverse(nodes, n.left, o, inv_d, tmax);
  if (n.right >= 0) c += traverse(nodes, n.right, o, inv_d, tmax);
  return c;
}

__global__ void count_candidates(const BvhNode* __restrict__ nodes, const float3* __restrict__ origins, const float3* __restrict__ dirs,
                                 int* __restrict__ counts, int nrays) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= nrays) return;
  const float3 d = dirs[i];
  counts[i] = traverse(nodes, 0, origins[i], make_float3(1.f / d.x, 1.f / d.y, 1.f / d.z), 1e30f);
}

// Mutually recursive descent parser/evaluator over a tokenised arithmetic expression.
struct Parser {
  const char* s;
  int pos;
  __device__ double expr();
  __device__ double term();
  __device__ double factor() {
    if (s[pos] == '(') {
      ++pos;
      const double v = expr();
      ++pos;  // ')'
      return v;
    }
    if (s[pos] == '-') {
      ++pos;
      return -factor();
    }
    double v = 0.0;
    while (s[pos] >= '0' && s[pos] <= '9') v = v * 10.0 + (s[pos++] - '0');
    return v;
  }
};
__device__ double Parser::term() {
  double v = factor();
  while (s[pos] == '*' || s[pos] == '/') {
    const char op = s[pos++];
    const double r = factor();
    v = op == '*' ? v * r : v / r;
  }
  return v;
}
__device__ double Parser::expr() {
  double v = term();
  while (s[pos] == '+' || s[pos] == '-') {
    const char op = s[pos++];
    const double r = term();
    v = op == '+' ? v + r : v - r;
  }
  return v;
}

__global__ void eval_expressions(const char* __restrict__ text, const int* __restrict__ starts, double* __restrict__ out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Parser p{text + starts[i], 0};
  out[i] = p.expr();
}

// Plain recursion depth driven by data: Ackermann-limited and Fibonacci with memo in local memory.
__device__ uint64_t fib(int n) { return n < 2 ? uint64_t(n) : fib(n - 1) + fib(n - 2); }
__global__ void fib_kernel(const int* __restrict__ n, unsigned long long* __restrict__ out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  out[i] = fib(min(n[i], 24));
}
