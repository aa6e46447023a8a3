#!/usr/bin/env python3
"""The compiler launcher (`kcache nvcc ...`, `kcache clang++ ...`) against the compiler alone, in
the same run on the same machine: whole-process wall time of one `-c` compile.

For each source and compiler, each round:
  cold    `kcache COMPILER ...` against a kcached on a fresh database (every step a miss), then
  plain   the same command without kcache, alternated with it so drift hits both alike;
  warm    `kcache COMPILER ...` again (for nvcc, its whole compile a hit: only the preprocessors
          run here; for clang, every step a hit: its preprocessors and the image's packaging run).
Sources: tests/data/launcher/src/softmax.cu (a kernel of the project's fixture, templates and a
shared header) and bench/corpus/launcher/thrust_sort.cu (Thrust's sort and CUB's reduce, code of
the toolkit's own), each for sm_80 and sm_90. Then the whole project of tests/data/launcher (its
CUDA files, CMake, `ninja -j2`) built with nvcc through CMAKE_CUDA_COMPILER_LAUNCHER=kcache, cold and
warm after `ninja clean`, beside the same build without it. The median of the rounds and the
ratios to plain. Writes bench/results/launcher.{md,csv}.

Usage: bench/launcher.py [build-dir]   ROUNDS=5 by default; KCACHE_BENCH_OUT for the folder;
       KCACHE_BENCH_PARTS="files project" (both by default);
       KCACHE_BENCH_NOTE for a sentence about the machine (what else ran).
"""
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import render_readme  # bench/render_readme.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build").resolve()
ROUNDS = int(os.environ.get("ROUNDS", "5"))
OUT = Path(os.environ.get("KCACHE_BENCH_OUT", ROOT / "bench" / "results"))
CUDA = Path(os.environ.get("CUDA_ROOT", "/usr/local/cuda"))
KCACHED = BUILD / "server" / "kcached"
KCACHE = BUILD / "client" / "kcache"
NVCC = CUDA / "bin" / "nvcc"
CLANG = shutil.which("clang++-22")
INCLUDE = ROOT / "tests" / "data" / "launcher" / "include"
PARTS = os.environ.get("KCACHE_BENCH_PARTS", "files project").split()
PROJECT = ROOT / "tests" / "data" / "launcher"
SOURCES = [ROOT / "tests" / "data" / "launcher" / "src" / "softmax.cu",
           ROOT / "bench" / "corpus" / "launcher" / "thrust_sort.cu"]


def die(message):
    print(f"launcher.py: {message}", file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """A kcached on a fresh database in `work`."""

    def __init__(self, work):
        self.port = free_port()
        self.db = Path(tempfile.mkdtemp(dir=work, prefix="db-"))
        self.log = open(self.db.with_suffix(".log"), "w")
        self.proc = subprocess.Popen([str(KCACHED), "--listen", f"127.0.0.1:{self.port}", "--db", str(self.db)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        until = time.monotonic() + 30
        while subprocess.run([str(KCACHE), "--server", f"127.0.0.1:{self.port}", "health"],
                             capture_output=True).returncode != 0:
            if time.monotonic() > until or self.proc.poll() is not None:
                die(f"kcached did not start (log: {self.log.name})")
            time.sleep(0.05)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        self.log.close()
        shutil.rmtree(self.db, ignore_errors=True)


def timed(argv, env, cwd):
    start = time.monotonic()
    ran = subprocess.run(argv, env=env, cwd=cwd, capture_output=True)
    wall = time.monotonic() - start
    if ran.returncode != 0:
        die(f"{' '.join(argv)} failed:\n{ran.stderr.decode(errors='replace')}")
    return wall


def commands(source, out):
    nvcc = [str(NVCC), f"-I{INCLUDE}", "--extended-lambda", "-O3", "-gencode", "arch=compute_80,code=sm_80",
            "-gencode", "arch=compute_90,code=sm_90", "-c", str(source), "-o", out]
    runs = [("nvcc", nvcc)]
    if CLANG:
        runs.append(("clang++-22", [CLANG, "-x", "cuda", f"--cuda-path={CUDA}", "--cuda-gpu-arch=sm_80",
                                    "--cuda-gpu-arch=sm_90", "-std=c++17", f"-I{INCLUDE}", f"-I{CUDA}/include/cccl", "-O3", "-c", str(source),
                                    "-o", out]))
    return runs


def project_rounds(work, env, rows):
    """The fixture project: cold through the launcher, plain, warm after ninja clean."""
    builds = {}
    for name, launcher in (("kcache", [f"-DCMAKE_CUDA_COMPILER_LAUNCHER={KCACHE}"]), ("plain", [])):
        builds[name] = work / f"build-{name}"
        subprocess.run(["cmake", "-S", str(PROJECT), "-B", str(builds[name]), "-G", "Ninja",
                        f"-DCMAKE_CUDA_COMPILER={NVCC}"] + launcher, check=True, capture_output=True, env=env)

    def build(name):
        timed(["ninja", "-C", str(builds[name]), "-t", "clean"], env, work)
        return timed(["ninja", "-C", str(builds[name]), "-j2"], env, work)

    times = {"cold": [], "plain": [], "warm": []}
    for r in range(ROUNDS + 1):
        daemon = Daemon(work)
        env["KCACHE_SERVER"] = f"127.0.0.1:{daemon.port}"
        cold, plain, warm = build("kcache"), build("plain"), build("kcache")
        daemon.stop()
        if r == 0:
            continue
        for k, v in (("cold", cold), ("plain", plain), ("warm", warm)):
            times[k].append(v)
        print(f"project round {r}: cold {cold:.2f} s, plain {plain:.2f} s, warm {warm:.2f} s", file=sys.stderr)
    files = len(list((PROJECT / "src").glob("*.cu")))
    add_row(rows, f"tests/data/launcher ({files} files, ninja -j2)", "nvcc", times)


def add_row(rows, source, compiler, times):
    med = {k: statistics.median(v) for k, v in times.items()}
    pairs = sorted(c / p for c, p in zip(times["cold"], times["plain"]))
    rows.append((source, compiler, med["plain"], med["cold"], med["warm"], statistics.median(pairs),
                 med["warm"] / med["plain"]))


def main():
    for tool in (KCACHED, KCACHE, NVCC):
        if not tool.exists():
            die(f"{tool} is missing")
    work = Path(tempfile.mkdtemp(prefix="kcache-bench-launcher-"))
    env = dict(os.environ, KCACHE_STATE_DIR=str(work / "state"))
    rows = []
    try:
        for source in SOURCES if "files" in PARTS else []:
            for compiler, argv in commands(source, str(work / "out.o")):
                times = {"cold": [], "plain": [], "warm": []}
                for r in range(ROUNDS + 1):  # the first round warms the page cache and the tool digests
                    daemon = Daemon(work)
                    env["KCACHE_SERVER"] = f"127.0.0.1:{daemon.port}"
                    cold = timed([str(KCACHE)] + argv, env, work)
                    plain = timed(argv, env, work)
                    warm = timed([str(KCACHE)] + argv, env, work)
                    daemon.stop()
                    if r == 0:
                        continue
                    times["cold"].append(cold)
                    times["plain"].append(plain)
                    times["warm"].append(warm)
                    print(f"{source.name} {compiler} round {r}: cold {cold:.2f} s, plain {plain:.2f} s, "
                          f"warm {warm:.2f} s", file=sys.stderr)
                add_row(rows, source.name, compiler, times)
        if "project" in PARTS:
            project_rounds(work, env, rows)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "launcher.csv", "w") as f:
        f.write("source,compiler,plain_s,cold_s,warm_s,cold_over_plain,warm_over_plain\n")
        for row in rows:
            f.write(",".join([row[0], row[1]] + [f"{x:.3f}" for x in row[2:]]) + "\n")
    note = os.environ.get("KCACHE_BENCH_NOTE", "")
    lines = [f"## The compiler launcher (bench/launcher.py, {time.strftime('%Y-%m-%d')})", "",
             f"One `-c` compile for sm_80 and sm_90 at -O3, and the whole fixture project, whole-process wall "
             f"time, median of {ROUNDS} rounds; "
             "cold: every step a miss on a fresh kcached on this machine; warm: every step a hit; the ratio of "
             "cold to plain is the median of the pairs run one after the other." + (f" {note}" if note else ""), "",
             "| source | compiler | plain | launcher, cold | launcher, warm | cold / plain | warm / plain |",
             "|---|---|---|---|---|---|---|"]
    for s, c, plain, cold, warm, ratio, warm_ratio in rows:
        lines.append(f"| {s} | {c} | {plain:.2f} s | {cold:.2f} s | {warm:.2f} s | {ratio:.2f}x | {warm_ratio:.2f}x |")
    (OUT / "launcher.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    render_readme.render_after_run(OUT)


if __name__ == "__main__":
    main()
