#!/usr/bin/env python3
"""Writes the farm benchmark's CMake project (bench/launcher.py, part "farm") into a folder.

A project in the style of real CUDA ones (cuda-samples, a library with its applications): a static
library `farmcore` of 26 CUDA files with separable compilation (device functions called across
files, so every executable runs a device link), six applications linking it (one sorting with
Thrust), shared headers with templates, CUB's block primitives, host-only code under
`#ifndef __CUDA_ARCH__`, and four archs (sm_75, sm_80, sm_86, sm_90; CUDA 13 builds nothing older). 32 CUDA files in all. The
same folder gets the same bytes every time (no dates, no randomness), so runs compare.

Usage: bench/farm_project.py FOLDER
"""
import sys
from pathlib import Path

KINDS = ["map", "reduce", "scan", "stencil", "histogram", "transpose"]
TYPES = ["float", "double", "int", "unsigned"]
CORE_FILES = 26
APPS = 6
ARCHS = "75;80;86;90"

CMAKE = """cmake_minimum_required(VERSION 3.24)
set(CMAKE_CUDA_ARCHITECTURES "{archs}" CACHE STRING "The archs to build for")
project(farm LANGUAGES CXX CUDA)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CXX_STANDARD 17)
add_library(farmcore STATIC {core})
target_include_directories(farmcore PUBLIC include)
target_compile_options(farmcore PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
set_target_properties(farmcore PROPERTIES CUDA_SEPARABLE_COMPILATION ON POSITION_INDEPENDENT_CODE ON)
foreach(app {apps})
  add_executable(${{app}} apps/${{app}}.cu)
  target_link_libraries(${{app}} PRIVATE farmcore)
  set_target_properties(${{app}} PROPERTIES CUDA_SEPARABLE_COMPILATION ON)
endforeach()
"""

COMMON = """// The library's shared device helpers: templates every file instantiates, and device functions
// defined in one file and called from others (relocatable device code, linked per executable).
#pragma once
#include <cuda_runtime.h>
#include <cstdio>

namespace farm {

constexpr int k_block = 256;

extern __device__ float scale_of(int i);  // core_00.cu
extern __device__ int bucket_of(float x, int buckets);  // core_04.cu

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

template <class T>
struct Saxpy {
  T a;
  __device__ T operator()(T x, T y) const { return a * x + y; }
};

template <class T>
__host__ __device__ constexpr T clamp(T v, T lo, T hi) { return v < lo ? lo : (v > hi ? hi : v); }

inline __host__ void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) std::fprintf(stderr, "%s: %s\\n", what, cudaGetErrorString(e));
}

#ifndef __CUDA_ARCH__
// Host-only: how a launch reports itself.
inline void note_launch(const char* what) { check(cudaGetLastError(), what); }
#endif

}  // namespace farm
"""

KERNELS = {
    "map": """template <class T>
__global__ void map_{n}(T* y, const T* x, T a, int count) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) y[i] = farm::Saxpy<T>{{a}}(x[i], y[i]) * static_cast<T>(farm::scale_of(i));
}}
""",
    "reduce": """#include <cub/block/block_reduce.cuh>
template <class T>
__global__ void map_{n}(T* y, const T* x, T a, int count) {{
  using Reduce = cub::BlockReduce<T, farm::k_block>;
  __shared__ typename Reduce::TempStorage storage;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  T v = i < count ? x[i] * a : T(0);
  T sum = Reduce(storage).Sum(v);
  if (threadIdx.x == 0) y[blockIdx.x] = sum + farm::warp_sum(v);
}}
""",
    "scan": """#include <cub/block/block_scan.cuh>
template <class T>
__global__ void map_{n}(T* y, const T* x, T a, int count) {{
  using Scan = cub::BlockScan<T, farm::k_block>;
  __shared__ typename Scan::TempStorage storage;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  T v = i < count ? x[i] : T(0);
  Scan(storage).InclusiveSum(v, v);
  if (i < count) y[i] = v * a;
}}
""",
    "stencil": """template <class T>
__global__ void map_{n}(T* y, const T* x, T a, int count) {{
  __shared__ T tile[farm::k_block + 4];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x + 2] = i < count ? x[i] : T(0);
  if (threadIdx.x < 2) {{
    tile[threadIdx.x] = i >= 2 ? x[i - 2] : T(0);
    tile[threadIdx.x + farm::k_block + 2] = i + farm::k_block < count ? x[i + farm::k_block] : T(0);
  }}
  __syncthreads();
  T s = T(0);
#pragma unroll
  for (int k = 0; k < 5; ++k) s += tile[threadIdx.x + k];
  if (i < count) y[i] = farm::clamp(s * a, T(0), T(1000));
}}
""",
    "histogram": """template <class T>
__global__ void map_{n}(T* y, const T* x, T a, int count) {{
  __shared__ unsigned bins[64];
  if (threadIdx.x < 64) bins[threadIdx.x] = 0;
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < count) atomicAdd(&bins[farm::bucket_of(static_cast<float>(x[i] * a), 64)], 1u);
  __syncthreads();
  if (threadIdx.x < 64) y[blockIdx.x * 64 + threadIdx.x] = static_cast<T>(bins[threadIdx.x]);
}}
""",
    "transpose": """template <class T>
__global__ void map_{n}(T* y, const T* x, T a, int count) {{
  __shared__ T tile[32][33];
  int side = 1;
  while (side * side < count) side *= 2;
  int bx = blockIdx.x * 32, by = blockIdx.y * 32;
  int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  for (int r = ty; r < 32; r += farm::k_block / 32) {{
    int row = by + r, col = bx + tx;
    tile[r][tx] = row < side && col < side && row * side + col < count ? x[row * side + col] : T(0);
  }}
  __syncthreads();
  for (int r = ty; r < 32; r += farm::k_block / 32) {{
    int row = bx + r, col = by + tx;
    if (row < side && col < side && row * side + col < count) y[row * side + col] = tile[tx][r] * a;
  }}
}}
""",
}

EXTRA = {
    0: """__device__ float farm::scale_of(int i) { return 1.0f + 0.5f * static_cast<float>(i & 7); }
""",
    4: """__device__ int farm::bucket_of(float x, int buckets) {
  int b = static_cast<int>(x) % buckets;
  return b < 0 ? b + buckets : b;
}
""",
}

CORE = """// farmcore's {kind} kernel, file {n:02d} ({t}).
#include "farm/common.cuh"
#include "farm/kernels.cuh"

{extra}{kernel}
void farm::run_{n:02d}({t}* y, const {t}* x, {t} a, int count) {{
  map_{n}<<<(count + farm::k_block - 1) / farm::k_block, farm::k_block>>>(y, x, a, count);
#ifndef __CUDA_ARCH__
  farm::note_launch("run_{n:02d}");
#endif
}}
"""

APP = """// Application {n}: runs a few of the library's kernels on device buffers.
#include <cstdio>
#include <vector>
#include "farm/common.cuh"
#include "farm/kernels.cuh"
{includes}
int main() {{
  const int count = 1 << 16;
{body}
  std::printf("app_{n} done\\n");
  return 0;
}}
"""

THRUST = """#include <thrust/device_vector.h>
#include <thrust/sort.h>
#include <thrust/reduce.h>
"""


def core_type(n):
    return TYPES[(n // len(KINDS)) % len(TYPES)]


def write(folder):
    folder = Path(folder)
    (folder / "include" / "farm").mkdir(parents=True, exist_ok=True)
    (folder / "src").mkdir(exist_ok=True)
    (folder / "apps").mkdir(exist_ok=True)
    core = [f"src/core_{n:02d}.cu" for n in range(CORE_FILES)]
    apps = [f"app_{n}" for n in range(APPS)]
    (folder / "CMakeLists.txt").write_text(CMAKE.format(archs=ARCHS, core=" ".join(core), apps=" ".join(apps)))
    (folder / "include" / "farm" / "common.cuh").write_text(COMMON)
    decls = "".join(f"void run_{n:02d}({core_type(n)}* y, const {core_type(n)}* x, {core_type(n)} a, int count);\n"
                    for n in range(CORE_FILES))
    (folder / "include" / "farm" / "kernels.cuh").write_text(
        "// Host launchers of farmcore's kernels.\n#pragma once\nnamespace farm {\n" + decls + "}  // namespace farm\n")
    for n in range(CORE_FILES):
        kind = KINDS[n % len(KINDS)]
        t = core_type(n)
        text = CORE.format(kind=kind, n=n, t=t, extra=EXTRA.get(n, ""), kernel=KERNELS[kind].format(n=n))
        (folder / "src" / f"core_{n:02d}.cu").write_text(text)
    for n in range(APPS):
        calls = []
        for k in range(n, CORE_FILES, APPS):
            t = core_type(k)
            calls.append(f"  {{\n    {t}* x = nullptr;\n    {t}* y = nullptr;\n"
                         f"    farm::check(cudaMalloc(&x, count * sizeof({t})), \"x\");\n"
                         f"    farm::check(cudaMalloc(&y, count * sizeof({t})), \"y\");\n"
                         f"    farm::run_{k:02d}(y, x, {t}(2), count);\n    cudaFree(x);\n    cudaFree(y);\n  }}")
        includes = ""
        if n == 0:
            includes = THRUST
            calls.append("  thrust::device_vector<float> v(count, 1.0f);\n  thrust::sort(v.begin(), v.end());\n"
                         "  std::printf(\"sum %f\\n\", thrust::reduce(v.begin(), v.end()));")
        (folder / "apps" / f"app_{n}.cu").write_text(APP.format(n=n, includes=includes, body="\n".join(calls)))
    return CORE_FILES + APPS


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(f"{write(sys.argv[1])} CUDA files in {sys.argv[1]}")
