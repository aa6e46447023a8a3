#!/usr/bin/env python3
"""Miss path on the CUDA pattern corpus (tests/data/cuda): cold compiles, kcache against the bare
toolchain doing the same work as processes, in the same run on the same machine.

  1. start-up    kcached from exec to answering (`kcache health`), a fresh database each round;
  2. miss        every module-arch job of corpus.tsv (clang bitcode; the time-limit kernel left
                 out), one `kcache compile --emit ptx,cubin` per job against a running kcached
                 (2 workers), summed; beside the bare toolchain per job: llvm-link, opt -O2, llc
                 (the module's own +ptxNN), ptxas, and nvlink where the module is relocatable or
                 calls the device runtime, summed;
  3. three-arch  one job for sm_80, sm_86 and sm_90 per module that has sm_80 bitcode, against a
                 fresh kcached with 2 workers (the archs of a job compile at once on free
                 workers), beside three sequential reference runs of the same bitcode.

Reports the median of the rounds and the ratios; writes bench/results/miss_path.{md,csv}.
Usage: bench/miss_path.py [build-dir]      ROUNDS=3 by default; KCACHE_BENCH_OUT for the folder;
       KCACHE_BENCH_MODULES=N for the first N modules only (a quick try).
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import render_readme  # bench/render_readme.py, beside this script

ROOT = Path(__file__).resolve().parent.parent
BUILD = Path(sys.argv[1] if len(sys.argv) > 1 else ROOT / "build").resolve()
ROUNDS = int(os.environ.get("ROUNDS", "3"))
OUT = Path(os.environ.get("KCACHE_BENCH_OUT", ROOT / "bench" / "results"))
CUDA = Path(os.environ.get("CUDA_ROOT", "/usr/local/cuda"))
LLVM_BIN = Path(subprocess.run(["llvm-config-22", "--bindir"], capture_output=True, text=True).stdout.strip()
                or "/usr/lib/llvm-22/bin")
CORPUS_DIR = BUILD / "tests" / "cuda"
TSV = ROOT / "tests" / "data" / "cuda" / "corpus.tsv"
KCACHED = BUILD / "server" / "kcached"
KCACHE = BUILD / "client" / "kcache"
THREE_ARCHS = ["sm_80", "sm_86", "sm_90"]
WORKERS = "2"


def die(message):
    print(f"miss_path: {message}", file=sys.stderr)
    sys.exit(1)


def read_corpus():
    modules = []
    for line in TSV.read_text().splitlines()[1:]:
        if not line or line.startswith("#"):
            continue
        name, sources, archs, flags = line.split("\t")[:4]
        flags = set(flags.split(","))
        if "huge" in flags:
            continue  # the time-limit kernel: it measures ptxas on one giant block, not a pattern
        stems = [s.rsplit(".", 1)[0] for s in sources.split(",")]
        modules.append({"name": name, "stems": stems, "archs": archs.split(","),
                        "rdc": "rdc" in flags, "cdp": "cdp" in flags})
    return modules


def bitcode(stem, arch):
    return CORPUS_DIR / f"{stem}.{arch}.bc"


def run(argv, **kw):
    r = subprocess.run(argv, capture_output=True, **kw)
    if r.returncode != 0:
        die(f"{' '.join(map(str, argv))} failed ({r.returncode}): {r.stderr.decode(errors='replace')[:2000]}")
    return r


_versions = {}


def ptx_versions(module, bc_arch):
    """The module's own +ptxNN tags (llc takes the PTX ISA per module, not from function
    attributes), read once and outside the timing: someone running the toolchain by hand knows it."""
    key = (module["name"], bc_arch)
    if key not in _versions:
        text = "".join(run([LLVM_BIN / "llvm-dis", bitcode(s, bc_arch), "-o", "-"]).stdout.decode(errors="replace")
                       for s in module["stems"])
        _versions[key] = [int(v) for v in re.findall(r"\+ptx([0-9]+)", text)]
    return _versions[key]


def reference(module, bc_arch, arch, work):
    """The bare toolchain on one module for one arch, as the corpus parity test runs it; seconds."""
    linked, opt, ptx, cubin = work / "m.bc", work / "m.opt.bc", work / "m.ptx", work / "m.cubin"
    versions = ptx_versions(module, bc_arch)
    start = time.perf_counter()
    run([LLVM_BIN / "llvm-link", "-o", linked] + [bitcode(s, bc_arch) for s in module["stems"]])
    run([LLVM_BIN / "opt", "-O2", linked, "-o", opt])
    run([LLVM_BIN / "llc", "-mtriple=nvptx64-nvidia-cuda", f"-mcpu={arch}",
         f"-mattr=+ptx{max(versions)}" if versions else "-mattr=", opt, "-o", ptx])
    link = module["rdc"] or module["cdp"]
    run([CUDA / "bin" / "ptxas", f"-arch={arch}"] + (["-c"] if link else []) + [ptx, "-o", work / "m.o" if link else cubin])
    if link:
        run([CUDA / "bin" / "nvlink", f"-arch={arch}", work / "m.o"]
            + ([CUDA / "lib64" / "libcudadevrt.a"] if module["cdp"] else []) + ["-o", cubin])
    return time.perf_counter() - start


class Daemon:
    """A kcached on a loopback port with a fresh database, 2 workers."""

    def __init__(self, work, tag):
        self.dir = work / f"kcached.{tag}"
        self.dir.mkdir()
        port_file = self.dir / "port"
        start = time.perf_counter()
        self.log = open(self.dir / "log", "w")
        self.proc = subprocess.Popen([KCACHED, "--listen", "127.0.0.1:0", "--db", self.dir / "db", "--port-file",
                                      port_file, "--workers", WORKERS, "--queue-depth", "64", "--log-level", "warn"],
                                     stdout=subprocess.DEVNULL, stderr=self.log)
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None:
                die(f"kcached exited with {self.proc.returncode}; log: {self.dir / 'log'}")
            time.sleep(0.002)
        self.server = f"127.0.0.1:{port_file.read_text().strip()}"
        run([KCACHE, "--server", self.server, "health"])
        self.startup = time.perf_counter() - start

    def compile(self, files, archs, out_dir, emit="ptx,cubin"):
        start = time.perf_counter()
        run([KCACHE, "--server", self.server, "compile", *files, "--arch", ",".join(archs), "--emit", emit,
             "--out-dir", out_dir])
        return time.perf_counter() - start

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()


def write_results(name, md, rows):
    """OUT/NAME.md (the lines of `md`) and OUT/NAME.csv (one line per round of `rows`, seconds)."""
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.md").write_text("\n".join(md) + "\n")
    with open(OUT / f"{name}.csv", "w") as f:
        keys = list(rows[0])
        f.write("round," + ",".join(f"{k}_s" for k in keys) + "\n")
        for i, row in enumerate(rows):
            f.write(f"{i + 1}," + ",".join(f"{row[k]:.3f}" for k in keys) + "\n")
    print("\n".join(md))
    render_readme.render_after_run(OUT)


def one_round(modules, work, r):
    row = {}
    d = Daemon(work, f"{r}.miss")
    row["startup"] = d.startup
    kc = bare = 0.0
    for m in modules:
        for arch in m["archs"]:
            out = work / f"out.{r}.{m['name']}.{arch}"
            kc += d.compile([bitcode(s, arch) for s in m["stems"]], [arch], out)
            bare += reference(m, arch, arch, work)
    d.stop()
    row["kcache"], row["bare"] = kc, bare

    d = Daemon(work, f"{r}.three")
    kc3 = bare3 = 0.0
    for m in modules:
        if "sm_80" not in m["archs"]:
            continue
        files = [bitcode(s, "sm_80") for s in m["stems"]]
        kc3 += d.compile(files, THREE_ARCHS, work / f"out3.{r}.{m['name']}")
        bare3 += sum(reference(m, "sm_80", arch, work) for arch in THREE_ARCHS)
    d.stop()
    row["kcache3"], row["bare3"] = kc3, bare3
    return row


def main():
    for tool in (KCACHED, KCACHE):
        if not tool.exists():
            die(f"{tool} is missing: build first (cmake --build {BUILD})")
    if not (CUDA / "bin" / "ptxas").exists():
        die(f"needs the CUDA toolkit at {CUDA} (ptxas, nvlink)")
    modules = read_corpus()
    if os.environ.get("KCACHE_BENCH_MODULES"):  # the first N only, for a quick try
        modules = modules[:int(os.environ["KCACHE_BENCH_MODULES"])]
    missing = [str(bitcode(s, a)) for m in modules for a in m["archs"] for s in m["stems"] if not bitcode(s, a).exists()]
    if missing:
        die(f"the CUDA corpus is not built ({missing[0]} missing): cmake --build {BUILD} --target kcache_cuda_corpus")
    jobs = sum(len(m["archs"]) for m in modules)
    three = sum(1 for m in modules if "sm_80" in m["archs"])
    work = Path(tempfile.mkdtemp(prefix="kcache-miss."))
    rows = []
    try:
        for r in range(ROUNDS):
            rows.append(one_round(modules, work, r))
            print(f"round {r + 1}/{ROUNDS}: " + ", ".join(f"{k} {v:.2f} s" for k, v in rows[-1].items()), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
    ratio = med["kcache"] / med["bare"]
    ratio3 = med["kcache3"] / med["bare3"]
    verdict = "PASS" if ratio <= 0.8 else "FAIL"
    verdict3 = "PASS" if ratio3 <= 0.7 else "FAIL"
    cpus = os.cpu_count()
    md = [
        f"Miss path on the CUDA corpus (tests/data/cuda): {len(modules)} modules, clang-22 bitcode, PTX + cubin, cold; "
        f"median of {ROUNDS} rounds on {cpus} CPUs; kcached with {WORKERS} workers.",
        "",
        "| what | kcache s | bare toolchain s | kcache / bare |",
        "|---|---|---|---|",
        f"| kcached start-up (exec to answering `kcache health`) | {med['startup']:.2f} | | |",
        f"| {jobs} module-arch jobs, one `kcache compile` each, summed | {med['kcache']:.1f} | {med['bare']:.1f} | "
        f"{ratio:.2f} |",
        f"| {three} modules x {','.join(THREE_ARCHS)}: one 3-arch job each vs 3 sequential reference runs | "
        f"{med['kcache3']:.1f} | {med['bare3']:.1f} | {ratio3:.2f} |",
        "",
        "Bare toolchain: llvm-link, opt -O2, llc (the module's +ptxNN), ptxas, and nvlink for relocatable or "
        "device-runtime modules, one process each.",
        "",
        f"Target: miss path <= 0.8x the bare toolchain summed: {verdict} ({ratio:.2f})",
        f"Target: 3-arch jobs with 2 workers <= 0.7x three sequential reference runs: {verdict3} ({ratio3:.2f})",
    ]
    write_results("miss_path", md, rows)


if __name__ == "__main__":
    main()
