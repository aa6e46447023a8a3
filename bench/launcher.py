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

Then (part "farm") the farm benchmark: bench/farm_project.py's project (32 CUDA files, 4 archs,
device links) built by plain nvcc and kcache cold in turns (KCACHE_BENCH_COLD_ROUNDS of each, 2 by
default: a cold build moves by 15% from one run to the next here); kcache warm (the warm builds,
another folder and a second daemon KCACHE_BENCH_WARM_ROUNDS times each, 3 by default), in another folder and on a second
daemon sharing Redis; ccache cold, warm and in another folder; Debian's sccache cold and warm.
Writes bench/results/launcher_farm.{md,csv}.

Usage: bench/launcher.py [build-dir]   ROUNDS=5 by default; KCACHE_BENCH_OUT for the folder;
       KCACHE_BENCH_PARTS="files project farm" (all by default);
       KCACHE_BENCH_NOTE for a sentence about the machine (what else ran).
"""
import os
import shlex
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
PARTS = os.environ.get("KCACHE_BENCH_PARTS", "files project farm").split()
COLD_ROUNDS = max(1, int(os.environ.get("KCACHE_BENCH_COLD_ROUNDS", "2")))
WARM_ROUNDS = max(1, int(os.environ.get("KCACHE_BENCH_WARM_ROUNDS", "3")))
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

    def __init__(self, work, args=()):
        self.port = free_port()
        self.db = Path(tempfile.mkdtemp(dir=work, prefix="db-"))
        self.log = open(self.db.with_suffix(".log"), "w")
        self.proc = subprocess.Popen([str(KCACHED), "--listen", f"127.0.0.1:{self.port}", "--db", str(self.db)] + list(args),
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


class Redis:
    """A redis-server on a free port, for a fleet of two daemons."""

    def __init__(self, work):
        self.port = free_port()
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(work)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        until = time.monotonic() + 30
        while subprocess.run(["redis-cli", "-p", str(self.port), "ping"], capture_output=True,
                             text=True).stdout.strip() != "PONG":
            if time.monotonic() > until:
                die("redis-server did not start")
            time.sleep(0.05)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def farm(work, env):
    """The farm benchmark: bench/farm_project.py's project (32 CUDA files, 4 archs, a static library
    with separable compilation, six executables with device links), each tool's builds one after the
    other in one run, `ninja -j2`, whole-build wall time. Writes results/launcher_farm.{md,csv}."""
    import farm_project  # bench/farm_project.py, beside this script
    project = work / "farm"
    files = farm_project.write(project)
    base = dict(env)
    for k in ("CCACHE_DIR", "CCACHE_BASEDIR", "SCCACHE_DIR", "KCACHE_NODIRECT"):
        base.pop(k, None)

    # kcache as CMake's CUDA compiler (linked as nvcc): its compiles and its device links pass
    # through it (build-farms.md); ccache and sccache as the compiler launcher, as their users run them.
    masquerade = work / "kcache-bin" / "nvcc"
    masquerade.parent.mkdir(parents=True, exist_ok=True)
    masquerade.symlink_to(KCACHE)
    base["CUDA_PATH"] = str(CUDA)

    def configure(folder, launcher, e, extra=()):
        compiler = masquerade if launcher == "kcache" else NVCC
        args = ["cmake", "-S", str(project), "-B", str(work / folder), "-G", "Ninja", f"-DCMAKE_CUDA_COMPILER={compiler}",
                *extra]
        if launcher and launcher != "kcache":
            args.append(f"-DCMAKE_CUDA_COMPILER_LAUNCHER={launcher}")
        subprocess.run(args, check=True, capture_output=True, env=e)

    def build(folder, e, clean=False):
        if clean:
            timed(["ninja", "-C", str(work / folder), "-t", "clean"], e, work)
        seconds = timed(["ninja", "-C", str(work / folder), "-j2"], e, work)
        print(f"farm {folder}{' after clean' if clean else ''}: {seconds:.1f} s", file=sys.stderr)
        return seconds

    def one_file(folder, e):
        """The median of 5 compiles of one file (src/core_00.cu), the command ninja runs, each a hit."""
        target = "CMakeFiles/farmcore.dir/src/core_00.cu.o"
        commands = subprocess.run(["ninja", "-C", str(work / folder), "-t", "commands", target], env=e, check=True,
                                  capture_output=True, text=True).stdout.splitlines()
        argv = shlex.split(commands[-1])
        return statistics.median(timed(argv, e, work / folder) for _ in range(5))

    results = {}
    # The tools set beside kcache; a missing one's rows are left out, and the page says so.
    missing = [tool for tool in ("ccache", "sccache") if not shutil.which(tool)]
    for tool in missing:
        print(f"farm: {tool} is missing (apt-get install {tool}): its builds are left out", file=sys.stderr)
    plain_env = dict(base)
    # Cold builds move by 15% from one to the next on this machine: plain nvcc's and kcache's are
    # built in turns, COLD_ROUNDS of each, and their medians compared. The earlier rounds' kcache
    # runs on a fresh daemon of its own; the last round's is the fleet's first daemon, below.
    rounds = {"plain nvcc": [], "kcache cold": []}  # each build that ran more than once: its rounds' seconds

    def median_of(name, seconds):
        rounds[name] = list(seconds)
        results[name] = statistics.median(rounds[name])

    def fresh_folder(folder, launcher, e):
        configure(folder, launcher, e)
        return build(folder, e)

    for i in range(COLD_ROUNDS - 1):
        rounds["plain nvcc"].append(fresh_folder(f"plain-r{i}", None, plain_env))
        d = Daemon(work)
        try:
            k = dict(base, KCACHE_SERVER=f"127.0.0.1:{d.port}", KCACHE_STATE_DIR=str(work / f"kstate-r{i}"))
            rounds["kcache cold"].append(fresh_folder(f"kcache-r{i}", "kcache", k))
        finally:
            d.stop()
    configure("plain", None, plain_env)
    rounds["plain nvcc"].append(build("plain", plain_env))
    results["plain nvcc"] = statistics.median(rounds["plain nvcc"])
    # nvcc's own parallelism: each compile's archs at once (--threads 0: as many as it has archs).
    configure("plain-threads", None, plain_env, ["-DCMAKE_CUDA_FLAGS=--threads=0"])
    results["plain nvcc --threads 0"] = build("plain-threads", plain_env)

    redis = Redis(work)
    secret = work / "fleet.secret"
    secret.write_text("kcache-bench-fleet-secret-0123456789abcdef\n")
    secret.chmod(0o600)
    fleet = ["--remote", f"redis://127.0.0.1:{redis.port}", "--remote-secret-file", str(secret)]
    a = Daemon(work, fleet)
    try:
        k = dict(base, KCACHE_SERVER=f"127.0.0.1:{a.port}", KCACHE_STATE_DIR=str(work / "kstate-a"))
        configure("kcache-1", "kcache", k)
        rounds["kcache cold"].append(build("kcache-1", k))
        results["kcache cold"] = statistics.median(rounds["kcache cold"])
        median_of("kcache warm", [build("kcache-1", k, clean=True) for _ in range(WARM_ROUNDS)])
        results["kcache warm, direct mode off"] = build("kcache-1", dict(k, KCACHE_NODIRECT="1"), clean=True)
        median_of("kcache another folder", [fresh_folder(f"kcache-2-{i}", "kcache", k) for i in range(WARM_ROUNDS)])
        results["kcache one file warm"] = one_file("kcache-1", k)

        def second_daemon(i):
            """A fresh machine's state on a fresh second daemon of the fleet: every object from Redis."""
            b = Daemon(work, fleet)
            try:
                kb = dict(base, KCACHE_SERVER=f"127.0.0.1:{b.port}", KCACHE_STATE_DIR=str(work / f"kstate-b{i}"))
                return fresh_folder(f"kcache-3-{i}", "kcache", kb)
            finally:
                b.stop()
        median_of("kcache second daemon, same Redis", [second_daemon(i) for i in range(WARM_ROUNDS)])
    finally:
        a.stop()
        redis.stop()

    if shutil.which("ccache"):
        c = dict(base, CCACHE_DIR=str(work / "ccache"), CCACHE_BASEDIR=str(work))
        configure("ccache-1", "ccache", c)
        results["ccache cold"] = build("ccache-1", c)
        median_of("ccache warm", [build("ccache-1", c, clean=True) for _ in range(WARM_ROUNDS)])
        median_of("ccache another folder", [fresh_folder(f"ccache-2-{i}", "ccache", c) for i in range(WARM_ROUNDS)])
        results["ccache one file warm"] = one_file("ccache-1", c)
    if shutil.which("sccache"):
        sc = dict(base, SCCACHE_DIR=str(work / "sccache"), SCCACHE_SERVER_PORT=str(free_port()))
        subprocess.run(["sccache", "--start-server"], env=sc, capture_output=True)
        try:
            configure("sccache-1", "sccache", sc)
            results["sccache cold"] = build("sccache-1", sc)
            median_of("sccache warm", [build("sccache-1", sc, clean=True) for _ in range(WARM_ROUNDS)])
        finally:
            subprocess.run(["sccache", "--stop-server"], env=sc, capture_output=True)

    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "launcher_farm.csv", "w") as f:
        f.write("build,seconds\n")
        for name, seconds in results.items():
            f.write(f"{name},{seconds:.3f}\n")
        for name, each in rounds.items():
            for i, seconds in enumerate(each):
                f.write(f"{name}, round {i + 1},{seconds:.3f}\n")

    def ratio(a_name, b_name):
        if a_name not in results or b_name not in results:
            return "-"
        return f"{results[a_name] / results[b_name]:.2f}x"

    targets = [("warm rebuild", "kcache warm", "ccache warm", "0.5x"),
               ("another folder", "kcache another folder", "ccache another folder", "1.0x"),
               ("second daemon of the fleet", "kcache second daemon, same Redis", "ccache another folder", "1.0x"),
               ("cold", "kcache cold", "plain nvcc", "1.0x"),
               ("cold, against nvcc --threads 0", "kcache cold", "plain nvcc --threads 0", "-"),
               ("one file's warm hit", "kcache one file warm", "ccache one file warm", "2x")]
    note = os.environ.get("KCACHE_BENCH_NOTE", "")
    def rounds_of(name):
        return ", ".join(f"{seconds:.2f}" for seconds in rounds[name])
    lines = [f"## The farm benchmark (bench/launcher.py, part farm, {time.strftime('%Y-%m-%d')})", "",
             f"bench/farm_project.py's CMake project ({files} CUDA files, archs {farm_project.ARCHS.replace(';', ', ')}, "
             "a static library with separable compilation, six executables with device links), "
             "kcache as CMake's CUDA compiler (linked as nvcc: compiles and device links), ccache and sccache as "
             "`CMAKE_CUDA_COMPILER_LAUNCHER`, `ninja -j2`, whole-build wall time, one after the other in one run. "
             f"Plain nvcc's and kcache's cold builds ran in turns, {COLD_ROUNDS} of each; the warm builds, another "
             f"folder and a second daemon {WARM_ROUNDS} times each: the table gives their medians, the rounds are "
             "below it. Warm: `ninja -t clean`, then the build again; another folder: a fresh build folder on the same "
             "machine (ccache with `CCACHE_BASEDIR`); second daemon: a fresh machine's state and folder on a fresh "
             "second kcached sharing the first's Redis; one file: the median of 5 compiles of src/core_00.cu, all hits." +
             (f" {note}" if note else "") +
             (f" Left out, not installed: {', '.join(missing)}." if missing else ""), "",
             "| build | seconds |", "|---|---|"]
    lines += [f"| {name} | {seconds:.2f} |" for name, seconds in results.items()]
    lines += ["", "Each round, in the order run: " +
              "; ".join(f"{name} {rounds_of(name)} s" for name in rounds if len(rounds[name]) > 1) + "."]
    lines += ["", "| target | kcache | against | ratio | target |", "|---|---|---|---|---|"]
    for what, ours, theirs, target in targets:
        if ours in results and theirs in results:
            lines.append(f"| {what} | {results[ours]:.2f} s | {theirs}: {results[theirs]:.2f} s | "
                         f"{ratio(ours, theirs)} | {target} |")
    (OUT / "launcher_farm.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


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
        if "farm" in PARTS:
            farm(work, env)
            if not rows:
                return render_readme.render_after_run(OUT)
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
