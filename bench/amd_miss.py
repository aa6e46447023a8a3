#!/usr/bin/env python3
"""Miss path for AMD GPUs: cold compiles of the AMD test inputs (tests/data/amd: clang's HIP
bitcode from the build, GPUCompiler-style IR from the source tree) to HSA code objects, kcache
against the bare toolchain doing the same work as processes, in the same run on the same machine.
Then the same on the HIP pattern corpus (tests/data/hip: 28 files of real-style HIP code through
Debian's HIP 5.2.3 headers, one bitcode per arch) for gfx90a, gfx942, gfx1030 and gfx1100, whose
bare toolchain also links hip.bc; jobs the bare toolchain refuses (no oclc_isa_version file for
gfx942 or gfx11 in rocm-device-libs 5.2.3, where the code reads it) are left out of both sums.

Per module and target (gfx90a: wave64 CDNA; gfx1030: wave32 RDNA, both with oclc_isa_version
files in Debian's rocm-device-libs), one `kcache compile --emit hsaco` against a running kcached
(2 workers, a fresh database each round), summed; beside the bare toolchain per job: llvm-link
(the module, then --only-needed rtlib's amdgcn bitcode, ocml, ockl and the target's oclc control
files), opt -O2, llc -filetype=obj and ld.lld -shared, one process each, summed.

Reports the median of the rounds and the ratio; writes bench/results/amd_miss.{md,csv}.
Usage: bench/amd_miss.py [build-dir]      ROUNDS=3 by default; KCACHE_BENCH_OUT for the folder.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from miss_path import (BUILD, KCACHE, KCACHED, LLVM_BIN, ROOT, ROUNDS, WORKERS, Daemon, die, run,  # noqa: E402
                       write_results)

DATA = ROOT / "tests" / "data" / "amd"
CORPUS = BUILD / "tests" / "amd"
RTLIB = BUILD / "rtlib" / "rtlib_amdgcn.bc"
DEVICE_LIBS = Path(os.environ.get("KCACHE_ROCM_DEVICE_LIBS", "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode"))
# (target, its oclc files) as clang's HIP driver would pick them, defaults otherwise.
TARGETS = {
    "gfx90a": ["oclc_isa_version_90a", "oclc_wavefrontsize64_on"],
    "gfx1030": ["oclc_isa_version_1030", "oclc_wavefrontsize64_off"],
}
HIP_CORPUS = BUILD / "tests" / "hip"
HIP_ARCHS = ["gfx90a", "gfx942", "gfx1030", "gfx1100"]
COMMON_OCLC = ["oclc_abi_version_500", "oclc_daz_opt_off", "oclc_finite_only_off", "oclc_unsafe_math_off",
               "oclc_correctly_rounded_sqrt_on"]


def modules():
    found = sorted(CORPUS.glob("*.bc")) + sorted(DATA.glob("*.ll"))
    if not any(p.suffix == ".bc" for p in found):
        die(f"the AMD corpus is not built: cmake --build {BUILD} --target kcache_amd_corpus")
    return found


def reference(module, target, work):
    """The bare toolchain on one module for one target; seconds."""
    linked, opt, obj, hsaco = work / "a.bc", work / "a.opt.bc", work / "a.o", work / "a.hsaco"
    libs = [RTLIB, DEVICE_LIBS / "ocml.bc", DEVICE_LIBS / "ockl.bc"] + \
        [DEVICE_LIBS / f"{name}.bc" for name in TARGETS[target] + COMMON_OCLC]
    start = time.perf_counter()
    run([LLVM_BIN / "llvm-link", module, "--only-needed", *libs, "-o", linked])
    run([LLVM_BIN / "opt", "-O2", "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={target}", linked, "-o", opt])
    run([LLVM_BIN / "llc", "-O2", "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={target}", "-filetype=obj", opt, "-o", obj])
    run([LLVM_BIN / "ld.lld", "-shared", "--no-undefined", obj, "-o", hsaco])
    return time.perf_counter() - start


def hip_jobs():
    """(bitcode, arch) of the HIP corpus: each file's bitcode made for each arch it lists."""
    jobs = []
    for line in (ROOT / "tests" / "data" / "hip" / "corpus.tsv").read_text().splitlines()[1:]:
        if not line or line.startswith("#"):
            continue
        name, archs = line.split("\t")[:2]
        for arch in archs.split(","):
            bc = HIP_CORPUS / f"{Path(name).stem}.{arch}.bc"
            if arch not in HIP_ARCHS:
                continue
            if not bc.exists():
                die(f"{bc} is missing: the bench needs every arch of the HIP corpus, "
                    f"cmake -B {BUILD} -DKCACHE_CORPUS_ARCHS=all && cmake --build {BUILD}")
            jobs.append((bc, arch))
    return jobs


def hip_reference(module, arch, work):
    """The bare toolchain as clang's HIP toolchain links (tests/data/hip/README.md); seconds, or
    None where it refuses the module."""
    linked, opt, obj, hsaco = work / "h.bc", work / "h.opt.bc", work / "h.o", work / "h.hsaco"
    wave = "off" if arch.startswith("gfx1") else "on"
    libs = [DEVICE_LIBS / "hip.bc", DEVICE_LIBS / "ocml.bc", DEVICE_LIBS / "ockl.bc",
            DEVICE_LIBS / f"oclc_wavefrontsize64_{wave}.bc"] + [DEVICE_LIBS / f"{name}.bc" for name in COMMON_OCLC]
    isa = DEVICE_LIBS / f"oclc_isa_version_{arch[3:]}.bc"
    if isa.exists():
        libs.append(isa)
    start = time.perf_counter()
    for argv in ([LLVM_BIN / "llvm-link", module, "--only-needed", "--internalize", *libs, "-o", linked],
                 [LLVM_BIN / "opt", "-O2", linked, "-o", opt],
                 [LLVM_BIN / "llc", "-O2", "-mtriple=amdgcn-amd-amdhsa", f"-mcpu={arch}", "-filetype=obj", opt, "-o", obj],
                 [LLVM_BIN / "ld.lld", "-shared", "--no-undefined", obj, "-o", hsaco]):
        if subprocess.run(argv, capture_output=True).returncode != 0:
            return None
    return time.perf_counter() - start


def one_round(inputs, hip, work, r):
    d = Daemon(work, f"{r}.amd")
    kc = bare = 0.0
    for m in inputs:
        for target in TARGETS:
            kc += d.compile([m], [target], work / f"out.{r}.{m.stem}.{target}", emit="hsaco")
            bare += reference(m, target, work)
    hip_kc = hip_bare = 0.0
    hip_compared = 0
    for bc, arch in hip:
        reference_seconds = hip_reference(bc, arch, work)
        if reference_seconds is None:
            continue
        hip_kc += d.compile([bc], [arch], work / f"out.{r}.{bc.stem}", emit="hsaco")
        hip_bare += reference_seconds
        hip_compared += 1
    d.stop()
    return {"startup": d.startup, "kcache": kc, "bare": bare, "hip_kcache": hip_kc, "hip_bare": hip_bare,
            "hip_jobs": hip_compared}


def main():
    for tool in (KCACHED, KCACHE, RTLIB, DEVICE_LIBS / "ocml.bc"):
        if not tool.exists():
            die(f"{tool} is missing: build first (cmake --build {BUILD}); ocml.bc comes with Debian's rocm-device-libs")
    inputs = modules()
    hip = hip_jobs()
    if not hip:
        die(f"the HIP corpus is not built: cmake --build {BUILD} --target kcache_hip_corpus (needs libamdhip64-dev)")
    work = Path(tempfile.mkdtemp(prefix="kcache-amd."))
    rows = []
    try:
        for r in range(ROUNDS):
            rows.append(one_round(inputs, hip, work, r))
            print(f"round {r + 1}/{ROUNDS}: " + ", ".join(f"{k} {v:.2f} s" for k, v in rows[-1].items()), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
    ratio = med["kcache"] / med["bare"]
    hip_ratio = med["hip_kcache"] / med["hip_bare"]
    jobs = len(inputs) * len(TARGETS)
    md = [
        f"Miss path for AMD GPUs: {len(inputs)} modules of tests/data/amd (HIP through clang-22, GPUCompiler-style IR) "
        f"x {', '.join(TARGETS)}, hsaco, cold; median of {ROUNDS} rounds on {os.cpu_count()} CPUs; kcached with "
        f"{WORKERS} workers.",
        "",
        "| what | kcache s | bare toolchain s | kcache / bare |",
        "|---|---|---|---|",
        f"| kcached start-up (exec to answering `kcache health`) | {med['startup']:.2f} | | |",
        f"| {jobs} module-target jobs, one `kcache compile` each, summed | {med['kcache']:.2f} | {med['bare']:.2f} | "
        f"{ratio:.2f} |",
        f"| HIP corpus: {med['hip_jobs']:.0f} of {len(hip)} file-arch jobs (those the bare toolchain accepts), "
        f"one `kcache compile` each, summed | {med['hip_kcache']:.2f} | {med['hip_bare']:.2f} | {hip_ratio:.2f} |",
        "",
        "Bare toolchain: llvm-link (module, then --only-needed rtlib, ocml, ockl, the target's oclc files), opt -O2, "
        "llc -filetype=obj, ld.lld -shared, one process each; for the HIP corpus llvm-link also takes hip.bc and "
        "--internalize, as clang's HIP toolchain links.",
    ]
    write_results("amd_miss", md, rows)


if __name__ == "__main__":
    main()
