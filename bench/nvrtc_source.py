#!/usr/bin/env python3
"""CUDA C++ source jobs (NVRTC): kcache against NVRTC in process and nvcc, in the same run.

Two kernels written the way projects write them, each compiled to an sm_90 cubin these ways:

  1. NVRTC in process   kcache_bench_nvrtc (bench/nvrtc_inproc.cpp): what a JIT user such as
                        CuPy does, one process, the headers in memory; the median of the runs.
  2. nvcc               `nvcc -cubin -arch=sm_90 -I inc -o X.cubin K.cu`, one process per run.
  3. kcache in process  kcache_bench_source (bench/source_client.cpp): the same JIT user calling
                        libkcache instead, against a kcached with 2 workers and a fresh database:
                        a miss (Client::compile, a new key every run), a hit (Client::compile of
                        the unchanged source) and the load-time fetch (Client::fetch_or_compile:
                        the key computed in the client, one GET).
  4. kcache CLI         `kcache compile K.cu -I inc --arch sm_90 --emit cubin --out-dir D`, one
                        process per run: a miss (a `// round N` line appended) and a hit.

Each measure first runs once untimed (a warm-up: page cache, NVRTC's first compile in a process,
the daemon's first job) and then ROUNDS times; the medians are compared. Targets, per kernel,
in process against in process: the hit (fetch_or_compile, the load-time call) at least 50x
faster than NVRTC, the miss at most 1.1x NVRTC.

Writes bench/results/nvrtc_source.{md,csv}. Usage: bench/nvrtc_source.py [build-dir] [--self-test]
(--self-test: the NVRTC and nvcc measures only, no kcached, nothing written).
Knobs: ROUNDS (9), KCACHE_BENCH_OUT for the folder, CUDA_ROOT (/usr/local/cuda), KCACHE_BENCH_NVRTC
for the harness (else BUILD/bench/kcache_bench_nvrtc), KCACHE_BENCH_SOURCE for the libkcache
one (else BUILD/bench/kcache_bench_source), KCACHE_BENCH_NAME_EXPR=1 to look the
kernels up by name expression (nvrtcAddNameExpression; `kcache compile --name-expr`) as CuPy's
name_expressions do, in NVRTC in process and in kcache alike.
"""
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import render_readme  # bench/render_readme.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
ARGS = [a for a in sys.argv[1:] if a != "--self-test"]
SELF_TEST = "--self-test" in sys.argv[1:]
BUILD = Path(ARGS[0] if ARGS else ROOT / "build").resolve()
ROUNDS = int(os.environ.get("ROUNDS", "9"))
OUT = Path(os.environ.get("KCACHE_BENCH_OUT", ROOT / "bench" / "results"))
CUDA = Path(os.environ.get("CUDA_ROOT", "/usr/local/cuda"))
KCACHED = BUILD / "server" / "kcached"
KCACHE = BUILD / "client" / "kcache"
HARNESS = Path(os.environ.get("KCACHE_BENCH_NVRTC") or BUILD / "bench" / "kcache_bench_nvrtc")
CLIENT = Path(os.environ.get("KCACHE_BENCH_SOURCE") or BUILD / "bench" / "kcache_bench_source")
NAME_EXPR = os.environ.get("KCACHE_BENCH_NAME_EXPR", "0") == "1"
ARCH = "sm_90"
MEASURES = ("nvrtc", "nvcc", "miss", "hit", "fetch", "cli_miss", "cli_hit")
HIT_TARGET = 50.0   # NVRTC in process / kcache fetch_or_compile hit in process, at least
MISS_TARGET = 1.1   # kcache miss in process / NVRTC in process, at most

# Kernel 1: a templated SAXPY and sum reduction, their helpers in a project header found through
# -I inc (inc/detail/math.cuh, included as "detail/math.cuh").
MATH_CUH = r"""// Device helpers shared by a project's kernels: included as "detail/math.cuh" with -I inc.
#pragma once

namespace detail {

template <typename T>
__device__ __forceinline__ T axpy(T a, T x, T y) {
  return a * x + y;
}

// Sum over the 32 lanes of a warp; lane 0 has the total.
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over a block of BLOCK threads; thread 0 has the total.
template <typename T, int BLOCK>
__device__ T block_sum(T v) {
  static_assert(BLOCK % 32 == 0 && BLOCK <= 1024, "BLOCK is whole warps");
  __shared__ T partial[BLOCK / 32];
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = v;
  __syncthreads();
  v = threadIdx.x < BLOCK / 32 ? partial[threadIdx.x] : T(0);
  return threadIdx.x < 32 ? warp_sum(v) : v;
}

}  // namespace detail
"""

SAXPY_REDUCE_CU = r"""// A templated SAXPY and sum reduction, instantiated for float and double.
#include "detail/math.cuh"

template <typename T>
__global__ void saxpy(T a, const T* __restrict__ x, T* __restrict__ y, unsigned long long n) {
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    y[i] = detail::axpy(a, x[i], y[i]);
  }
}

template <typename T, int BLOCK = 256>
__global__ void __launch_bounds__(BLOCK) reduce_sum(const T* __restrict__ x, T* out, unsigned long long n) {
  T sum = T(0);
  for (unsigned long long i = blockIdx.x * BLOCK + threadIdx.x; i < n; i += gridDim.x * BLOCK) sum += x[i];
  sum = detail::block_sum<T, BLOCK>(sum);
  if (threadIdx.x == 0) atomicAdd(out, sum);
}

template __global__ void saxpy<float>(float, const float*, float*, unsigned long long);
template __global__ void saxpy<double>(double, const double*, double*, unsigned long long);
template __global__ void reduce_sum<float>(const float*, float*, unsigned long long);
template __global__ void reduce_sum<double>(const double*, double*, unsigned long long);
"""

# Kernel 2: half precision and cooperative groups, from the toolkit's own headers.
HALF_REDUCE_CU = r"""// Half-precision dot product with a cooperative-groups block reduction, and a templated scale.
#include <cooperative_groups.h>
#include <cuda_fp16.h>

namespace cg = cooperative_groups;

template <int BLOCK>
__global__ void __launch_bounds__(BLOCK) half_dot(const __half2* __restrict__ a, const __half2* __restrict__ b,
                                                  float* out, unsigned n2) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<32> warp = cg::tiled_partition<32>(block);
  __shared__ float partial[BLOCK / 32];

  float sum = 0.0f;
  for (unsigned i = blockIdx.x * BLOCK + threadIdx.x; i < n2; i += gridDim.x * BLOCK) {
    float2 p = __half22float2(__hmul2(a[i], b[i]));
    sum += p.x + p.y;
  }
  for (int offset = warp.size() / 2; offset > 0; offset /= 2) sum += warp.shfl_down(sum, offset);
  if (warp.thread_rank() == 0) partial[warp.meta_group_rank()] = sum;
  block.sync();
  if (warp.meta_group_rank() == 0) {
    sum = warp.thread_rank() < BLOCK / 32 ? partial[warp.thread_rank()] : 0.0f;
    for (int offset = warp.size() / 2; offset > 0; offset /= 2) sum += warp.shfl_down(sum, offset);
    if (block.thread_rank() == 0) atomicAdd(out, sum);
  }
}

template <typename T>
__global__ void scale(T* x, T s, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * s;
}

template __global__ void half_dot<256>(const __half2*, const __half2*, float*, unsigned);
template __global__ void scale<__half>(__half*, __half, unsigned);
template __global__ void scale<float>(float*, float, unsigned);
"""

# Each kernel: its file, its project headers (path under the kernel's folder -> text), the -I
# folders, and its name expressions (the instantiations a launcher looks up, as CuPy's
# name_expressions: used with KCACHE_BENCH_NAME_EXPR=1; the source instantiates them explicitly,
# so the code compiled is the same either way, and nvcc needs none).
KERNELS = [
    {"name": "saxpy_reduce", "file": "saxpy_reduce.cu", "source": SAXPY_REDUCE_CU,
     "headers": {"inc/detail/math.cuh": MATH_CUH}, "includes": ["inc"],
     "name_exprs": ["saxpy<float>", "saxpy<double>", "reduce_sum<float>", "reduce_sum<double>"]},
    {"name": "half_reduce", "file": "half_reduce.cu", "source": HALF_REDUCE_CU,
     "headers": {}, "includes": [],
     "name_exprs": ["half_dot<256>", "scale<__half>", "scale<float>"]},
]


def die(message):
    print(f"nvrtc_source: {message}", file=sys.stderr)
    sys.exit(1)


def write_kernel(work, k):
    """The kernel's source and headers in a folder of their own; returns the folder."""
    d = work / k["name"]
    d.mkdir()
    (d / k["file"]).write_text(k["source"])
    for rel, text in k["headers"].items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


def include_name(k, rel):
    """The name a header's #include spells: its path under the -I folder that holds it."""
    for inc in k["includes"]:
        if rel.startswith(inc.rstrip("/") + "/"):
            return rel[len(inc.rstrip("/")) + 1:]
    return rel


def timed(argv, cwd, env=None):
    """Runs one command; (milliseconds, result). The caller checks the exit status."""
    start = time.perf_counter()
    r = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True)
    return (time.perf_counter() - start) * 1000.0, r


def harness_runs(kdir, k, cubin):
    """NVRTC in process: 1 + ROUNDS compiles in one kcache_bench_nvrtc process, with the daemon's
    options (bench/nvrtc_inproc.cpp); the timed runs' ms."""
    argv = [HARNESS, k["file"], "--arch", ARCH, "--repeat", ROUNDS + 1, "--cuda-root", CUDA, "--out", cubin]
    for rel in k["headers"]:
        argv += ["--header", f"{include_name(k, rel)}={rel}"]
    for e in k["name_exprs"] if NAME_EXPR else []:
        argv += ["--name-expr", e]
    _, r = timed(argv, kdir)
    if r.returncode != 0:
        die(f"{HARNESS} failed on {k['file']} ({r.returncode}):\n{r.stderr[-3000:]}")
    runs = [float(line.split(",")[1]) for line in r.stdout.splitlines()[1:] if line.strip()]
    if len(runs) != ROUNDS + 1:
        die(f"{HARNESS} printed {len(runs)} runs, not {ROUNDS + 1}:\n{r.stdout}")
    return runs[1:]  # the first compile in the process is the warm-up


def nvcc_runs(kdir, k):
    """nvcc as a process, 1 + ROUNDS times; the timed runs' ms."""
    argv = [CUDA / "bin" / "nvcc", "-cubin", f"-arch={ARCH}"]
    for inc in k["includes"]:
        argv += ["-I", inc]
    argv += ["-o", f"{k['name']}.nvcc.cubin", k["file"]]
    runs = []
    for _ in range(ROUNDS + 1):
        ms, r = timed(argv, kdir)
        if r.returncode != 0:
            die(f"nvcc failed on {k['file']} ({r.returncode}):\n{r.stderr[-3000:]}")
        runs.append(ms)
    return runs[1:]


class Daemon:
    """A kcached on a free loopback port with a fresh database and 2 workers."""

    def __init__(self, work):
        self.dir = work / "kcached"
        self.dir.mkdir()
        port_file = self.dir / "port"
        self.log_path = self.dir / "log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([str(KCACHED), "--listen", "127.0.0.1:0", "--port-file", str(port_file),
                                      "--db", str(self.dir / "db"), "--workers", "2", "--cuda-root", str(CUDA)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        until = time.monotonic() + 30
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None:
                die(f"kcached exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
            if time.monotonic() > until:
                self.stop()
                die("timed out waiting for kcached's port file")
            time.sleep(0.02)
        self.server = f"127.0.0.1:{port_file.read_text().strip()}"
        # The client remembers each daemon it has seen (for the fast path of a hit) in a state
        # folder: one of this run's own, not the user's ~/.cache/kcache.
        self.env = dict(os.environ, KCACHE_STATE_DIR=str(work / "client-state"))

    def compile(self, kdir, k, source_file, out_dir, expect):
        """One `kcache compile` of source_file; its wall ms. Stops the run if it fails, makes no
        cubin, or reports another outcome than `expect` (its first word: hit or miss)."""
        argv = [KCACHE, "compile", source_file, "--server", self.server]
        for inc in k["includes"]:
            argv += ["-I", inc]
        for e in k["name_exprs"] if NAME_EXPR else []:
            argv += ["--name-expr", e]
        argv += ["--arch", ARCH, "--emit", "cubin", "--out-dir", out_dir]
        ms, r = timed(argv, kdir, self.env)
        if r.returncode != 0:
            die(f"`{' '.join(map(str, argv))}` in {kdir} failed ({r.returncode}):\n{r.stderr[-3000:]}"
                f"\nkcached's log ends:\n{self.log_path.read_text()[-2000:]}")
        cubin = Path(kdir) / out_dir / f"{ARCH}.cubin"
        if not cubin.exists() or cubin.stat().st_size == 0:
            die(f"`{' '.join(map(str, argv))}` made no {cubin}; it printed:\n{r.stdout[-2000:]}")
        words = r.stdout.split()
        outcome = words[0] if words else ""
        if expect and outcome in ("hit", "miss", "coalesced") and outcome != expect:
            die(f"{k['name']}: a {expect} was measured, but kcache answered '{outcome}':\n{r.stdout[-2000:]}")
        return ms

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def inprocess_runs(daemon, kdir, k, cubin):
    """kcache through libkcache: 1 + ROUNDS runs each of miss, hit and fetch in one
    kcache_bench_source process; the timed runs' ms of each, by measure."""
    argv = [CLIENT, "--server", daemon.server, k["file"], "--arch", ARCH, "--repeat", ROUNDS + 1, "--out", cubin]
    for inc in k["includes"]:
        argv += ["-I", inc]
    for e in k["name_exprs"] if NAME_EXPR else []:
        argv += ["--name-expr", e]
    _, r = timed(argv, kdir)
    if r.returncode != 0:
        die(f"{CLIENT} failed on {k['file']} ({r.returncode}):\n{r.stderr[-3000:]}"
            f"\nkcached's log ends:\n{daemon.log_path.read_text()[-2000:]}")
    runs = {}
    for line in r.stdout.splitlines()[1:]:
        measure, _, ms = line.split(",")
        runs.setdefault(measure, []).append(float(ms))
    for measure in ("miss", "hit", "fetch"):
        if len(runs.get(measure, [])) != ROUNDS + 1:
            die(f"{CLIENT} printed {len(runs.get(measure, []))} {measure} runs, not {ROUNDS + 1}:\n{r.stdout}")
    return {m: runs[m][1:] for m in ("miss", "hit", "fetch")}  # the first of each is the warm-up


def kcache_runs(daemon, kdir, k):
    """Miss: 1 + ROUNDS compiles of the source with a `// round N` line appended, each a new key.
    Hit: the unchanged source compiled once (a miss, which fills the cache), then 1 + ROUNDS
    times again. Returns the timed runs' ms of each and the hit's cubin."""
    misses = []
    for n in range(ROUNDS + 1):
        (kdir / "miss.cu").write_text(k["source"] + f"// round {n}\n")
        misses.append(daemon.compile(kdir, k, "miss.cu", f"out.miss.{n}", "miss"))
    daemon.compile(kdir, k, k["file"], "out.hit", None)  # a miss, or a hit where libkcache compiled it first
    hits = [daemon.compile(kdir, k, k["file"], "out.hit", "hit") for _ in range(ROUNDS + 1)]
    return misses[1:], hits[1:], (kdir / "out.hit" / f"{ARCH}.cubin").read_bytes()


def main():
    # Without the toolkit or NVRTC there is nothing to compare: say why, write nothing.
    for f, what in ((CUDA / "bin" / "nvcc", "nvcc"), (CUDA / "include" / "nvrtc.h", "NVRTC's header"),
                    (CUDA / "lib64" / "libnvrtc.so", "NVRTC")):
        if not f.exists():
            print(f"nvrtc_source: skipped: {what} is not in the CUDA toolkit at {CUDA} ({f} is missing)")
            return
    needed = (HARNESS,) if SELF_TEST else (KCACHED, KCACHE, HARNESS, CLIENT)
    for f in needed:
        if not f.exists():
            die(f"{f} is missing: build it (ninja -C {BUILD} kcache_bench), or point KCACHE_BENCH_NVRTC at "
                "a harness built by hand (bench/nvrtc_inproc.cpp says how)")
    work = Path(tempfile.mkdtemp(prefix="kcache-nvrtc-bench."))
    results = []
    daemon = None
    try:
        if not SELF_TEST:
            daemon = Daemon(work)
        for k in KERNELS:
            kdir = write_kernel(work, k)
            row = {"kernel": k["name"], "nvrtc": harness_runs(kdir, k, kdir / "nvrtc.cubin"),
                   "nvcc": nvcc_runs(kdir, k)}
            if daemon:
                row.update(inprocess_runs(daemon, kdir, k, kdir / "inprocess.cubin"))
                row["cli_miss"], row["cli_hit"], hit_cubin = kcache_runs(daemon, kdir, k)
                nvrtc_cubin = (kdir / "nvrtc.cubin").read_bytes()
                row["same_cubin"] = hit_cubin == nvrtc_cubin and (kdir / "inprocess.cubin").read_bytes() == nvrtc_cubin
            results.append(row)
            print(f"{k['name']}: " + ", ".join(f"{m} {statistics.median(row[m]):.2f} ms"
                                               for m in MEASURES if m in row), flush=True)
    finally:
        if daemon:
            daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    if SELF_TEST:
        return

    lines = [f"# CUDA C++ source jobs (NVRTC), {ARCH} cubin", "",
             f"Median of {ROUNDS} runs each, after one untimed warm-up, on {os.cpu_count()} CPUs; kcached with 2 "
             "workers and a fresh database; name expressions "
             f"{'given' if NAME_EXPR else 'not given'}. In process: NVRTC (`kcache_bench_nvrtc`) and libkcache "
             "(`kcache_bench_source`: miss and hit through `Client::compile`, fetch through "
             "`Client::fetch_or_compile`). CLI: one `kcache compile` process per run. Hit speed-up: NVRTC / "
             "fetch (the load-time call) and NVRTC / hit. Miss ratio: miss / NVRTC.", "",
             "| kernel | NVRTC ms | nvcc ms | miss ms | hit ms | fetch ms | CLI miss ms | CLI hit ms | "
             "hit speed-up (fetch / compile) | miss ratio | kcache's cubin = NVRTC's |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    verdict = []
    csv_rows = []
    for row in results:
        med = {m: statistics.median(row[m]) for m in MEASURES}
        speedup = med["nvrtc"] / med["fetch"]
        compile_speedup = med["nvrtc"] / med["hit"]
        miss_ratio = med["miss"] / med["nvrtc"]
        lines.append(f"| {row['kernel']} | {med['nvrtc']:.1f} | {med['nvcc']:.1f} | {med['miss']:.1f} | "
                     f"{med['hit']:.2f} | {med['fetch']:.2f} | {med['cli_miss']:.1f} | {med['cli_hit']:.2f} | "
                     f"{speedup:.0f}x / {compile_speedup:.0f}x | {miss_ratio:.2f} | "
                     f"{'yes' if row['same_cubin'] else 'no'} |")
        verdict.append(f"{'PASS' if speedup >= HIT_TARGET else 'FAIL'}: {row['kernel']}: a kcache hit in process "
                       f"(fetch_or_compile) {speedup:.0f}x faster than NVRTC in process (target >= {HIT_TARGET:.0f}x)")
        verdict.append(f"{'PASS' if miss_ratio <= MISS_TARGET else 'FAIL'}: {row['kernel']}: a kcache miss in process "
                       f"{miss_ratio:.2f}x NVRTC in process (target <= {MISS_TARGET})")
        for m in MEASURES:
            csv_rows.append({"kernel": row["kernel"], "measure": m, "median_ms": f"{med[m]:.3f}",
                             "runs_ms": " ".join(f"{v:.3f}" for v in row[m])})
    lines += ["", "NVRTC in process: create, compile, cubin and destroy in one process, the daemon's options. "
              "nvcc: `nvcc -cubin`, one process per run. kcache: a new key for every miss (a comment line "
              "appended to the source).", ""]
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "nvrtc_source.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["kernel", "measure", "median_ms", "runs_ms"])
        w.writeheader()
        w.writerows(csv_rows)
    (OUT / "nvrtc_source.md").write_text("\n".join(lines + verdict) + "\n")
    print("\n".join(lines + verdict))
    render_readme.render_after_run(OUT)


if __name__ == "__main__":
    main()
