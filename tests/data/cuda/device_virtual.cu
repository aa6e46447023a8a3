// Virtual functions on the device: an abstract base with pure virtuals, derived classes constructed in kernels (placement new into device memory), virtual dispatch and virtual destructors.
#include <new>

struct Shape {
  __device__ virtual ~Shape() {}
  __device__ virtual float area() const = 0;
  __device__ virtual float perimeter() const = 0;
  __device__ virtual int kind() const { return 0; }
  __device__ float compactness() const {
    const float p = perimeter();
    return p > 0.f ? 12.566370614f * area() / (p * p) : 0.f;
  }
};

struct Circle : Shape {
  float r;
  __device__ explicit Circle(float radius) : r(radius) {}
  __device__ float area() const override { return 3.14159265f * r * r; }
  __device__ float perimeter() const override { return 6.2831853f * r; }
  __device__ int kind() const override { return 1; }
};

struct Rect : Shape {
  float w, h;
  __device__ Rect(float ww, float hh) : w(ww), h(hh) {}
  __device__ float area() const override { return w * h; }
  __device__ float perimeter() const override { return 2.f * (w + h); }
  __device__ int kind() const override { return 2; }
};

struct Square final : Rect {
  __device__ explicit Square(float s) : Rect(s, s) {}
  __device__ int kind() const override { return 3; }
};

struct Polygon : Shape {
  const float2* pts;
  int n;
  __device__ Polygon(const float2* p, int count) : pts(p), n(count) {}
  __device__ float area() const override {
    float a = 0.f;
    for (int i = 0; i < n; ++i) {
      const float2 p = pts[i], q = pts[(i + 1) % n];
      a += p.x * q.y - q.x * p.y;
    }
    return fabsf(a) * 0.5f;
  }
  __device__ float perimeter() const override {
    float s = 0.f;
    for (int i = 0; i < n; ++i) {
      const float2 p = pts[i], q = pts[(i + 1) % n];
      s += hypotf(q.x - p.x, q.y - p.y);
    }
    return s;
  }
};

union ShapeStorage {
  Circle c;
  Rect r;
  Square s;
  Polygon p;
  __device__ ShapeStorage() {}
  __device__ ~ShapeStorage() {}
};

struct ShapeDesc {
  int type;
  float a, b;
  int first_pt, npts;
};

// Objects must be constructed on the device so their vtable pointers are device vtables.
__global__ void construct_shapes(const ShapeDesc* __restrict__ desc, const float2* __restrict__ pts, ShapeStorage* storage,
                                 Shape** objects, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const ShapeDesc d = desc[i];
  Shape* s;
  switch (d.type) {
    case 0: s = new (&storage[i]) Circle(d.a); break;
    case 1: s = new (&storage[i]) Rect(d.a, d.b); break;
    case 2: s = new (&storage[i]) Square(d.a); break;
    default: s = new (&storage[i]) Polygon(pts + d.first_pt, d.npts); break;
  }
  objects[i] = s;
}

__global__ void measure_shapes(Shape* const* __restrict__ objects, float* __restrict__ area, float* __restrict__ compact,
                               int* __restrict__ kinds, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const Shape* s = objects[i];
  area[i] = s->area();
  compact[i] = s->compactness();
  kinds[i] = s->kind();
}

__global__ void destroy_shapes(Shape** objects, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  objects[i]->~Shape();
  objects[i] = nullptr;
}

// Heap-allocated polymorphic objects with a virtual destructor called through delete.
__global__ void heap_shapes(float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  Shape* s = (i % 3 == 0) ? static_cast<Shape*>(new Circle(1.f + i)) : (i % 3 == 1) ? new Rect(1.f, float(i)) : new Square(2.f);
  out[i] = s ? s->area() + s->perimeter() : -1.f;
  delete s;
}
