#!/usr/bin/env python3
"""The remote tier (--remote) against Redis itself and against a fleet without it, in one run.

  1. remote hit   64 KiB entries written into Redis as another daemon of the fleet writes them;
                  daemon B fetches each twice (first from the remote: read, HMAC and digest
                  verified, kept locally; then from its local tiers), beside a direct HGET of the
                  same bytes from the same redis-server. Target: a first remote hit at most 3x
                  the HGET (p50).
  2. stampede     3 daemons x 16 clients compile the same 20 modules at once, cold: the
                  fleet's compile count with the tier (one redis-server) and without it (three
                  independent daemons). Target: exactly 1 compile per key with the tier.

Writes bench/results/remote_tier.{md,csv}. Usage: bench/remote_tier.py [build-dir]
Knobs: ROUNDS (3) for part 1, KCACHE_BENCH_OUT for the folder, KCACHE_BENCH_KEYS (200) for part 1.
"""
import csv
import io
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
ROUNDS = int(os.environ.get("ROUNDS", "3"))
KEYS = int(os.environ.get("KCACHE_BENCH_KEYS", "200"))
OUT = Path(os.environ.get("KCACHE_BENCH_OUT", ROOT / "bench" / "results"))
KCACHED = BUILD / "server" / "kcached"
TOOL = BUILD / "bench" / "kcache_bench_remote"
SAXPY = ROOT / "tests" / "data" / "kernels" / "saxpy.ll"


def die(message):
    print(f"remote_tier: {message}", file=sys.stderr)
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(condition, what, timeout=30):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        if condition():
            return
        time.sleep(0.02)
    die(f"timed out waiting for {what}")


class Processes:
    """Everything started here, stopped on exit."""

    def __init__(self, work):
        self.work = work
        self.procs = []

    def redis(self):
        port = free_port()
        d = self.work / f"redis-{port}"
        d.mkdir()
        p = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", str(d), "--maxmemory", "2gb",
                              "--maxmemory-policy", "allkeys-lru"],
                             stdout=open(d / "log", "w"), stderr=subprocess.STDOUT)
        self.procs.append(p)
        wait_for(lambda: subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True,
                                        text=True).stdout.strip() == "PONG", "redis-server")
        return f"127.0.0.1:{port}"

    def kcached(self, name, extra):
        d = self.work / name
        port_file = d / "port"
        d.mkdir()
        p = subprocess.Popen([str(KCACHED), "--listen", "127.0.0.1:0", "--port-file", str(port_file),
                              "--db", str(d / "db"), "--workers", "2", "--queue-depth", "256"] + extra,
                             stdout=open(d / "log", "w"), stderr=subprocess.STDOUT)
        self.procs.append(p)
        wait_for(lambda: port_file.exists() and port_file.read_text().strip(), f"kcached {name}")
        return f"127.0.0.1:{port_file.read_text().strip()}"

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs = []


def tool(*args):
    r = subprocess.run([str(TOOL)] + [str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        die(f"kcache_bench_remote {' '.join(map(str, args))}: {r.stderr[-2000:]}")
    return list(csv.DictReader(io.StringIO(r.stdout)))


def main():
    for f in (KCACHED, TOOL):
        if not f.exists():
            die(f"{f} is missing: build it (ninja -C {BUILD} kcache_bench)")
    if shutil.which("redis-server") is None:
        die("redis-server is not installed (apt-get install redis-server)")
    work = Path(tempfile.mkdtemp(prefix="kcache-remote-bench-"))
    secret = work / "fleet.secret"
    secret.write_bytes(os.urandom(64))
    procs = Processes(work)
    rows = []
    try:
        # 1. remote hit, ROUNDS rounds on a fresh Redis and daemon each.
        hits = {"remote_first": [], "remote_then_local": [], "redis_hget": []}
        for r in range(ROUNDS):
            redis = procs.redis()
            b = procs.kcached(f"b{r}", ["--remote", f"redis://{redis}", "--remote-secret-file", str(secret)])
            for row in tool("hit", "--daemon", b, "--redis", redis, "--secret", secret, "--keys", KEYS):
                hits[row["measure"]].append((float(row["p50_us"]), float(row["p90_us"])))
            procs.stop()
        med = {k: (statistics.median(p for p, _ in v), statistics.median(q for _, q in v)) for k, v in hits.items()}
        hget = med["redis_hget"][0]
        for k, (p50, p90) in med.items():
            rows.append({"part": "remote hit 64 KiB", "measure": k, "p50_us": f"{p50:.1f}", "p90_us": f"{p90:.1f}",
                         "vs_hget": f"{p50 / hget:.2f}"})

        # 2. the stampede, with the tier and without it.
        redis = procs.redis()
        fleet = [procs.kcached(f"f{i}", ["--remote", f"redis://{redis}", "--remote-secret-file", str(secret)])
                 for i in range(3)]
        with_tier = tool("stampede", "--daemons", ",".join(fleet), "--module", SAXPY, "--first", 0, "--keys", 20)[0]
        procs.stop()
        alone = [procs.kcached(f"s{i}", []) for i in range(3)]
        without = tool("stampede", "--daemons", ",".join(alone), "--module", SAXPY, "--first", 0, "--keys", 20)[0]
        procs.stop()
        for name, r in (("with the tier", with_tier), ("without it", without)):
            rows.append({"part": "stampede 3x16 clients, 20 keys", "measure": name, "compiles": r["compiles"],
                         "failures": r["failures"], "seconds": r["seconds"]})
    finally:
        procs.stop()
        shutil.rmtree(work, ignore_errors=True)

    OUT.mkdir(parents=True, exist_ok=True)
    fields = ["part", "measure", "p50_us", "p90_us", "vs_hget", "compiles", "failures", "seconds"]
    with open(OUT / "remote_tier.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    first_ratio = med["remote_first"][0] / hget
    lines = ["# The remote tier", "",
             f"One run on this machine: {ROUNDS} rounds of {KEYS} keys for the hit (medians of the rounds' p50 "
             "and p90), one stampede each way.", "",
             "| measure | p50 (us) | p90 (us) | vs direct HGET (p50) |", "|---|---|---|---|"]
    for k, label in (("remote_first", "first fetch on daemon B, from the remote"),
                     ("remote_then_local", "second fetch, from B's local tiers"),
                     ("redis_hget", "direct HGET of the same bytes")):
        p50, p90 = med[k]
        lines.append(f"| {label} | {p50:.1f} | {p90:.1f} | {p50 / hget:.2f}x |")
    lines += ["", "| stampede: 3 daemons x 16 clients, 20 keys | compiles | failed requests | seconds |",
              "|---|---|---|---|",
              f"| with the tier (one redis-server) | {with_tier['compiles']} | {with_tier['failures']} | {with_tier['seconds']} |",
              f"| without it (three daemons alone) | {without['compiles']} | {without['failures']} | {without['seconds']} |",
              ""]
    verdict = [f"{'PASS' if first_ratio <= 3 else 'FAIL'}: first remote hit {first_ratio:.2f}x a direct HGET (target <= 3x)",
               f"{'PASS' if with_tier['compiles'] == '20' else 'FAIL'}: {with_tier['compiles']} compiles for 20 keys "
               "across the fleet (target exactly 20)"]
    (OUT / "remote_tier.md").write_text("\n".join(lines + verdict) + "\n")
    print("\n".join(lines + verdict))
    render_readme.render_after_run(OUT)


if __name__ == "__main__":
    main()
