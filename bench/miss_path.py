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
                 workers), beside three sequential reference runs of the same bitcode;
  4. heavy       the kernels that cost the most, reported apart: the largest modules of the corpus
                 and bench/corpus/heavy (tensor-core GEMMs and unrolled FFTs written like real
                 ones), sm_80, one job at a time (nothing else queued), beside the bare toolchain
                 with ptxas at its own default (-O3) and at kcache's level (-O2);
  5. concurrent  16 distinct modules sent at once to a kcached of 2 workers (the queue full, so
                 every job gets one CPU), beside the bare toolchain running the same 16 two at a
                 time (one per core), wall time.

Reports the median of the rounds and the ratios; writes bench/results/miss_path.{md,csv}.
Usage: bench/miss_path.py [build-dir]      ROUNDS=3 by default; KCACHE_BENCH_OUT for the folder;
       KCACHE_BENCH_MODULES=N for the first N modules only (a quick try);
       KCACHE_BENCH_PARTS="small heavy concurrent" (parts 1-3 are "small", 4 "heavy", 5 "concurrent").
"""
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
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
HEAVY_DIR = ROOT / "bench" / "corpus" / "heavy"
HEAVY_FROM_CORPUS = 3  # the corpus's largest modules (sm_80 bitcode) in the heavy set
PARTS = os.environ.get("KCACHE_BENCH_PARTS", "small heavy concurrent").split()
CONCURRENT = 16
CLANG = shutil.which("clang-22") or str(LLVM_BIN / "clang")


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


_heavy_bitcode = {}


def bitcode(stem, arch):
    if stem in _heavy_bitcode:
        return _heavy_bitcode[stem]
    return CORPUS_DIR / f"{stem}.{arch}.bc"


def heavy_modules(modules, work):
    """The heavy set: bench/corpus/heavy/*.cu compiled to sm_80 bitcode here (as the corpus is
    built, outside any timing), then the corpus's largest sm_80 modules."""
    heavy = []
    for source in sorted(HEAVY_DIR.glob("*.cu")):
        out = work / f"{source.stem}.sm_80.bc"
        run([CLANG, "-x", "cuda", f"--cuda-path={CUDA}", "--cuda-device-only", "-emit-llvm", "-c", "-O2",
             "-Wno-unknown-cuda-version", f"-I{CUDA}/include/cccl", "--cuda-gpu-arch=sm_80", source, "-o", out])
        stem = f"heavy:{source.stem}"
        _heavy_bitcode[stem] = out
        heavy.append({"name": source.stem, "stems": [stem], "archs": ["sm_80"], "rdc": False, "cdp": False})
    plain = [m for m in modules if "sm_80" in m["archs"] and not m["rdc"] and not m["cdp"]]
    plain.sort(key=lambda m: -sum(bitcode(st, "sm_80").stat().st_size for st in m["stems"]))
    return heavy + plain[:HEAVY_FROM_CORPUS]


def heavy_round(heavy, work, r):
    """Each heavy module alone on a kcached of 2 workers (nothing else queued), and the bare
    toolchain at ptxas -O3 and -O2; seconds per module and what."""
    row = {}
    d = Daemon(work, f"{r}.heavy")
    for m in heavy:
        files = [bitcode(st, "sm_80") for st in m["stems"]]
        row[f"{m['name']}:kcache"] = d.compile(files, ["sm_80"], work / f"outh.{r}.{m['name']}")
        row[f"{m['name']}:bare_O3"] = reference(m, "sm_80", "sm_80", work)
        row[f"{m['name']}:bare_O2"] = reference(m, "sm_80", "sm_80", work, ptxas_level=2)
    d.stop()
    return row


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


def reference(module, bc_arch, arch, work, ptxas_level=None):
    """The bare toolchain on one module for one arch, as the corpus parity test runs it; seconds.
    `ptxas_level`: ptxas's --opt-level (None: its default, 3)."""
    linked, opt, ptx, cubin = work / "m.bc", work / "m.opt.bc", work / "m.ptx", work / "m.cubin"
    versions = ptx_versions(module, bc_arch)
    start = time.perf_counter()
    run([LLVM_BIN / "llvm-link", "-o", linked] + [bitcode(s, bc_arch) for s in module["stems"]])
    run([LLVM_BIN / "opt", "-O2", linked, "-o", opt])
    run([LLVM_BIN / "llc", "-mtriple=nvptx64-nvidia-cuda", f"-mcpu={arch}",
         f"-mattr=+ptx{max(versions)}" if versions else "-mattr=", opt, "-o", ptx])
    link = module["rdc"] or module["cdp"]
    level = [f"--opt-level={ptxas_level}"] if ptxas_level is not None else []
    run([CUDA / "bin" / "ptxas", f"-arch={arch}"] + level + (["-c"] if link else []) +
        [ptx, "-o", work / "m.o" if link else cubin])
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


def concurrent_round(modules, work, r):
    """CONCURRENT distinct sm_80 modules at once: kcache (one client process each, against a fresh
    kcached of 2 workers) and the bare toolchain (two at a time); wall seconds of each."""
    chosen = [m for m in modules if "sm_80" in m["archs"] and not m["rdc"] and not m["cdp"]][:CONCURRENT]
    d = Daemon(work, f"{r}.concurrent")
    start = time.perf_counter()
    procs = [subprocess.Popen([KCACHE, "--server", d.server, "compile", *[bitcode(s, "sm_80") for s in m["stems"]],
                               "--arch", "sm_80", "--emit", "ptx,cubin", "--out-dir", work / f"outc.{r}.{i}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
             for i, m in enumerate(chosen)]
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            die(f"a concurrent compile failed: {err.decode(errors='replace')[:2000]}")
    kc = time.perf_counter() - start
    d.stop()
    start = time.perf_counter()
    pending = list(enumerate(chosen))
    while pending:
        pair = [pending.pop(0) for _ in range(min(2, len(pending)))]
        dirs = []
        for i, _ in pair:
            dirs.append(work / f"bare.{r}.{i}")
            dirs[-1].mkdir(exist_ok=True)
        threads = [threading.Thread(target=reference, args=(m, "sm_80", "sm_80", w)) for (i, m), w in zip(pair, dirs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    bare = time.perf_counter() - start
    return {"kcache": kc, "bare": bare, "modules": float(len(chosen))}


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
        die(f"the CUDA corpus is not built for every arch ({missing[0]} missing): "
            f"cmake -B {BUILD} -DKCACHE_CORPUS_ARCHS=all && cmake --build {BUILD} --target kcache_cuda_corpus")
    jobs = sum(len(m["archs"]) for m in modules)
    three = sum(1 for m in modules if "sm_80" in m["archs"])
    work = Path(tempfile.mkdtemp(prefix="kcache-miss."))
    rows, heavy_rows, heavy, conc_rows = [], [], [], []
    try:
        if "heavy" in PARTS:
            heavy = heavy_modules(modules, work)
        for r in range(ROUNDS):
            if "small" in PARTS:
                rows.append(one_round(modules, work, r))
                print(f"round {r + 1}/{ROUNDS}: " + ", ".join(f"{k} {v:.2f} s" for k, v in rows[-1].items()), flush=True)
            if "concurrent" in PARTS:
                conc_rows.append(concurrent_round(modules, work, r))
                print(f"concurrent round {r + 1}/{ROUNDS}: kcache {conc_rows[-1]['kcache']:.2f} s, "
                      f"bare {conc_rows[-1]['bare']:.2f} s", flush=True)
            if heavy:
                heavy_rows.append(heavy_round(heavy, work, r))
                print(f"heavy round {r + 1}/{ROUNDS}: " +
                      ", ".join(f"{k} {v:.2f} s" for k, v in heavy_rows[-1].items()), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    cpus = os.cpu_count()
    md = []
    if rows:
        med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
        ratio = med["kcache"] / med["bare"]
        ratio3 = med["kcache3"] / med["bare3"]
        verdict = "PASS" if ratio <= 0.8 else "FAIL"
        verdict3 = "PASS" if ratio3 <= 0.7 else "FAIL"
        md += [
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
    if conc_rows:
        cmed = {k: statistics.median(row[k] for row in conc_rows) for k in ("kcache", "bare")}
        n = int(conc_rows[0]["modules"])
        cmd = [
            f"Concurrent misses: {n} distinct corpus modules (sm_80, PTX + cubin) sent at once to a kcached with "
            f"{WORKERS} workers, beside the bare toolchain running the same {n} two at a time; wall time, median of "
            f"{ROUNDS} rounds on {cpus} CPUs.",
            "",
            "| kcache s | bare toolchain s | kcache / bare |",
            "|---|---|---|",
            f"| {cmed['kcache']:.2f} | {cmed['bare']:.2f} | {cmed['kcache'] / cmed['bare']:.2f} |",
            "",
            "With the queue full every job is lent one CPU, so a busy daemon's throughput is what this measures.",
        ]
        write_results("miss_path_concurrent", cmd, [{k: row[k] for k in ("kcache", "bare")} for row in conc_rows])
    if heavy_rows:
        hmed = {k: statistics.median(row[k] for row in heavy_rows) for k in heavy_rows[0]}
        total = {w: sum(hmed[f"{m['name']}:{w}"] for m in heavy) for w in ("kcache", "bare_O3", "bare_O2")}
        hmd = [
            f"Miss path on the heavy set: {len(heavy)} modules (bench/corpus/heavy and the corpus's "
            f"{HEAVY_FROM_CORPUS} largest), sm_80, PTX + cubin, one job at a time on a kcached with {WORKERS} workers; "
            f"median of {ROUNDS} rounds on {cpus} CPUs.",
            "",
            "| module | kcache s | bare, ptxas -O3 s | bare, ptxas -O2 s | kcache / bare -O3 | kcache / bare -O2 |",
            "|---|---|---|---|---|---|",
        ]
        for m in heavy:
            k, o3, o2 = (hmed[f"{m['name']}:{w}"] for w in ("kcache", "bare_O3", "bare_O2"))
            hmd.append(f"| {m['name']} | {k:.2f} | {o3:.2f} | {o2:.2f} | {k / o3:.2f} | {k / o2:.2f} |")
        r3, r2 = total["kcache"] / total["bare_O3"], total["kcache"] / total["bare_O2"]
        hmd += [
            f"| **all** | {total['kcache']:.2f} | {total['bare_O3']:.2f} | {total['bare_O2']:.2f} | {r3:.2f} | {r2:.2f} |",
            "",
            "kcache assembles at its own default level (-O2) on the cores no other job uses (a split compile); "
            "the bare toolchain runs one ptxas process per module as a build would.",
            "",
            f"Target: heavy set <= 0.7x the bare toolchain (ptxas at kcache's level): "
            f"{'PASS' if r2 <= 0.7 else 'FAIL'} ({r2:.2f}; {r3:.2f} against ptxas -O3)",
        ]
        write_results("miss_path_heavy", hmd, heavy_rows)


if __name__ == "__main__":
    main()
