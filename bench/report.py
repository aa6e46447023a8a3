#!/usr/bin/env python3
"""Turns the raw measurements of bench/run.sh into compare.md, compare.csv and compare.png.

Reads RAW/{hit,scale,coalesce,disk,memory}.csv and RAW/store.N.json (Google Benchmark),
prints the Markdown summary and the PASS/FAIL lines of the targets, and plots with gnuplot where
it is installed. Standard library only.
"""
import argparse
import csv
import datetime
import glob
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys

# The targets (bench/README.md says why each is set where it is).
HIT_RATIO_MAX = {64 * 1024: 1.5, 4 * 1024: 2.0}  # kcached Fetch p50 / Redis GET p50, one client
THROUGHPUT_RATIO_MIN = 1.0   # kcached fetches/s / Redis GETs/s, 16 clients, 4 KiB and 64 KiB
RSS_MAX_MIB = 250            # kcached's peak VmRSS under the hit-path load
SCALE_RATIO_MAX = 2.0        # Lookup p50 at the most entries / at the fewest
CCACHE_RATIO_MIN = 5.0       # ccache nvcc -c hit / kcache compile hit, whole commands (medians)
SCCACHE_RATIO_MIN = 20.0     # sccache nvcc -c hit / kcache compile hit
KCACHE_COMMAND = "kcache compile"


def read_csv(path):
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def median_rows(rows, key):
    """One row per key: the median over the rounds of every numeric column, with `rounds` added."""
    groups = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    out = {}
    for k, group in groups.items():
        row = dict(group[0])
        for col in ("requests", "errors", "seconds", "p50_us", "p99_us", "mean_us", "max_us", "ops_per_s",
                    "mib_per_s"):
            row[col] = statistics.median(float(g[col]) for g in group)
        row["rounds"] = len(group)
        out[k] = row
    return out


def size_label(n):
    n = int(n)
    if n >= 1 << 20 and n % (1 << 20) == 0:
        return f"{n >> 20} MiB"
    if n >= 1024 and n % 1024 == 0:
        return f"{n >> 10} KiB"
    return f"{n} B"


def count_label(n):
    n = int(n)
    exp = len(str(n)) - 1
    return f"10^{exp}" if n == 10 ** exp else f"{n:,}"


def fmt(x, digits=1):
    if x is None:
        return "–"
    return f"{x:,.{digits}f}"


def machine_note(args):
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return (f"Run finished {args.finished} on {os.cpu_count()} cores ({cpu}), "
            f"Linux {platform.release()}; {args.measure_ms} ms measured per load point after a warm-up; "
            f"whole run {args.seconds} s; kcache {args.commit}.")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--raw", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--measure-ms", type=int, default=2000)
    p.add_argument("--kernels", type=int, default=100)
    p.add_argument("--seconds", type=int, default=0)
    p.add_argument("--redis", type=int, default=1)
    p.add_argument("--note", default=os.environ.get("KCACHE_BENCH_NOTE", ""))
    # To re-render a kept raw folder (KCACHE_BENCH_KEEP=1) with the time it was measured.
    p.add_argument("--commit", default="(commit unknown)")
    p.add_argument("--finished", default=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"))
    args = p.parse_args()

    hit = read_csv(os.path.join(args.raw, "hit.csv"))
    scale = read_csv(os.path.join(args.raw, "scale.csv"))
    coalesce = read_csv(os.path.join(args.raw, "coalesce.csv"))
    disk = read_csv(os.path.join(args.raw, "disk.csv"))
    memory = read_csv(os.path.join(args.raw, "memory.csv"))
    store = {}  # entries -> {benchmark: median real time in ns}
    for path in glob.glob(os.path.join(args.raw, "store.*.json")):
        entries = int(path.rsplit(".", 2)[1])
        with open(path) as f:
            for b in json.load(f)["benchmarks"]:
                if b.get("aggregate_name") == "median":
                    unit = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
                    store.setdefault(entries, {})[b["run_name"]] = b["real_time"] * unit

    long_rows = []  # bench,system,op,size_bytes,clients,entries,metric,value,unit

    def emit(bench, system, op, size, clients, entries, metric, value, unit):
        if value is not None:
            long_rows.append([bench, system, op, size, clients, entries, metric, value, unit])

    md = []
    md.append("# kcache side by side: hit path against Redis, coalescing, scale, memory")
    md.append("")
    md.append(machine_note(args))
    if args.note:
        md.append("")
        md.append(args.note)
    md.append("")
    md.append("Produced by `bench/run.sh`; ratios are within this one run, so they matter more than the "
              "absolute numbers.")
    md.append("")

    # 1. Hit path (GetStats rows, op "stats", are kcached's gRPC floor).
    floor = median_rows([r for r in hit if r["op"] == "stats"], lambda r: int(r["clients"]))
    by = median_rows([r for r in hit if r["op"] != "stats"],
                     lambda r: (r["system"], int(r["size_bytes"]), int(r["clients"])))
    sizes = sorted({k[1] for k in by})
    clients = sorted({k[2] for k in by})
    rounds = max([r["rounds"] for r in by.values()] + [1])
    md.append("## 1. Hit path, library level (loopback)")
    md.append("")
    md.append("kcached: `kcache::Client::fetch` (a GET from kcached's HTTP image API on a kept-alive connection, "
              "the image chosen as Fetch chooses; the bytes checked by the client against kcached's XXH3 of them, "
              "which kcached computes over bytes it verified against their SHA-256). Redis: hiredis "
              "`GET` of the same bytes from a local in-memory `redis-server`. One connection per client thread, "
              f"same harness; latency per request in µs; each number the median of {rounds} rounds, kcached and "
              "Redis alternating size by size.")
    md.append("")
    md.append("| image | clients | kcached p50 | kcached p99 | kcached fetches/s | Redis p50 | Redis p99 | Redis GETs/s "
              "| p50 kcached / Redis | throughput kcached / Redis |")
    md.append("|---|---|---|---|---|---|---|---|---|---|")
    for s in sizes:
        for c in clients:
            k = by.get(("kcached", s, c))
            r = by.get(("redis", s, c))
            kp50 = float(k["p50_us"]) if k else None
            rp50 = float(r["p50_us"]) if r else None
            kops = float(k["ops_per_s"]) if k else None
            rops = float(r["ops_per_s"]) if r else None
            ratio = kp50 / rp50 if kp50 and rp50 else None
            tratio = kops / rops if kops and rops else None
            md.append(f"| {size_label(s)} | {c} | {fmt(kp50)} | {fmt(float(k['p99_us']) if k else None)} | "
                      f"{fmt(kops, 0)} | {fmt(rp50)} | {fmt(float(r['p99_us']) if r else None)} | {fmt(rops, 0)} | "
                      f"{fmt(ratio, 2)} | {fmt(tratio, 2)} |")
            for system, row in (("kcached", k), ("redis", r)):
                if row:
                    op = row["op"]
                    for metric, unit in (("p50_us", "us"), ("p99_us", "us"), ("ops_per_s", "1/s"),
                                         ("mib_per_s", "MiB/s"), ("requests", "count"), ("errors", "count")):
                        emit("hit", system, op, s, c, "", metric, float(row[metric]), unit)
    md.append("")
    token_sizes = sorted({k[1] for k in by if k[0] == "kcached-token"})
    if token_sizes:
        md.append("With a token: the same load on a second kcached started with `--tokens-file`, every request "
                  "carrying `Authorization: Bearer ...` (kcached checks it before anything else). The client "
                  "library has no TLS on its HTTP path (a TLS client takes gRPC), so TLS is not in this table.")
        md.append("")
        md.append("| image | clients | kcached+token p50 | kcached+token fetches/s | p50 / Redis | throughput / Redis |")
        md.append("|---|---|---|---|---|---|")
        for s_ in token_sizes:
            for c in clients:
                t, r = by.get(("kcached-token", s_, c)), by.get(("redis", s_, c))
                if not t:
                    continue
                tp50, tops = float(t["p50_us"]), float(t["ops_per_s"])
                ratio = tp50 / float(r["p50_us"]) if r else None
                tratio = tops / float(r["ops_per_s"]) if r else None
                md.append(f"| {size_label(s_)} | {c} | {fmt(tp50)} | {fmt(tops, 0)} | {fmt(ratio, 2)} | {fmt(tratio, 2)} |")
                for metric, unit in (("p50_us", "us"), ("p99_us", "us"), ("ops_per_s", "1/s"), ("errors", "count")):
                    emit("hit", "kcached-token", t["op"], s_, c, "", metric, float(t[metric]), unit)
        md.append("")
    if floor:
        parts = [f"p50 {fmt(r['p50_us'])} µs, {fmt(r['ops_per_s'], 0)} calls/s with {c} client{'s' if c > 1 else ''}"
                 for c, r in sorted(floor.items())]
        md.append("The gRPC floor: kcached `GetStats`, a unary call that touches no store: " + "; ".join(parts) + ".")
        md.append("")
        for c, r in floor.items():
            emit("hit", "kcached", "stats", 0, c, "", "p50_us", r["p50_us"], "us")
            emit("hit", "kcached", "stats", 0, c, "", "p99_us", r["p99_us"], "us")
            emit("hit", "kcached", "stats", 0, c, "", "ops_per_s", r["ops_per_s"], "1/s")

    # 2. Coalescing.
    md.append("## 2. Coalescing: N identical concurrent compiles")
    md.append("")
    md.append(f"One device module of {args.kernels} kernels (LLVM text IR, sm_90, PTX), sent by N clients at once "
              "to a kcached with a fresh database. `compiles` is the daemon's own counter (GetStats).")
    md.append("")
    md.append("| N | wall ms | compiles | misses | coalesced | hits | errors |")
    md.append("|---|---|---|---|---|---|---|")
    for r in coalesce:
        md.append(f"| {r['clients']} | {fmt(float(r['wall_ms']))} | {r['compiles']} | {r['misses']} | "
                  f"{r['coalesced']} | {r['hits']} | {r['errors']} |")
        for metric in ("wall_ms", "compiles", "misses", "coalesced", "hits", "errors"):
            emit("coalesce", "kcached", "compile", "", r["clients"], "", metric, float(r[metric]),
                 "ms" if metric == "wall_ms" else "count")
    md.append("")

    # 3. Scale.
    sc = median_rows(scale, lambda r: (r["op"], int(r["entries"])))
    dk = {int(r["entries"]): r for r in disk}
    counts = sorted(dk)
    md.append("## 3. Scale: 1-4 KiB PTX images, one entry each")
    md.append("")
    md.append("Daemon: `kcache::Client::lookup` / `fetch` of a uniformly random stored key, one client, p50/p99 in µs "
              "(median of the rounds; one daemon per entry count, measured round-robin). "
              "Store API (Google Benchmark, no gRPC): `Store::list` of a stored key, of an absent key, and "
              "`Store::get`, median of 3 repetitions of the mean, in µs. Disk: `du` of the database folder after "
              "kcached stopped (it flushes RocksDB), per entry; payload is the image bytes per entry. Each database is "
              "measured right after its bulk load, while RocksDB is still compacting it in the background, as a "
              "daemon would be after a burst of writes (bench/README.md has the steady state).")
    md.append("")
    md.append("| entries | written in s (entries/s) | Lookup p50 | Lookup p99 | Fetch p50 | Fetch p99 | Store::list | "
              "Store::list absent | Store::get | disk bytes/entry | payload bytes/entry |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for n in counts:
        lk, fe, d, st = sc.get(("lookup", n)), sc.get(("fetch", n)), dk[n], store.get(n, {})
        secs = float(d["populate_s"])
        per_entry = int(d["du_after_daemon"]) / n
        payload = int(d["payload_bytes"]) / n
        lst = st.get("StoreList/present")
        absent = st.get("StoreList/absent")
        get = st.get("StoreGet")
        md.append(f"| {count_label(n)} | {fmt(secs)} ({fmt(n / secs, 0)}) | {fmt(float(lk['p50_us']) if lk else None)} | "
                  f"{fmt(float(lk['p99_us']) if lk else None)} | {fmt(float(fe['p50_us']) if fe else None)} | "
                  f"{fmt(float(fe['p99_us']) if fe else None)} | {fmt(lst / 1e3 if lst else None, 2)} | "
                  f"{fmt(absent / 1e3 if absent else None, 2)} | {fmt(get / 1e3 if get else None, 2)} | "
                  f"{fmt(per_entry, 0)} | {fmt(payload, 0)} |")
        for op, row in (("lookup", lk), ("fetch", fe)):
            if row:
                emit("scale", "kcached", op, "", 1, n, "p50_us", float(row["p50_us"]), "us")
                emit("scale", "kcached", op, "", 1, n, "p99_us", float(row["p99_us"]), "us")
        for name, value in st.items():
            emit("scale", "store", name, "", 1, n, "median_mean_us", value / 1e3, "us")
        emit("scale", "kcached", "populate", "", "", n, "seconds", secs, "s")
        emit("scale", "kcached", "disk", "", "", n, "bytes_per_entry", per_entry, "bytes")
        emit("scale", "kcached", "disk", "", "", n, "bytes_per_entry_before_daemon", int(d["du_after_populate"]) / n,
             "bytes")
        emit("scale", "kcached", "disk", "", "", n, "payload_bytes_per_entry", payload, "bytes")
    md.append("")

    # 4. Memory.
    md.append("## 4. Memory")
    md.append("")
    md.append("VmRSS and VmHWM of the kcached process (and of redis-server) from /proc/PID/status; kcached's compile "
              "workers are separate processes, shown apart. Under load: the highest VmRSS sampled every 0.1 s "
              "during (1).")
    md.append("")
    md.append("| process | state | VmRSS MiB | VmHWM MiB | compile workers' RSS MiB |")
    md.append("|---|---|---|---|---|")
    for r in memory:
        rss, hwm, kids = int(r["vmrss_kib"]) / 1024, int(r["vmhwm_kib"]) / 1024, int(r["children_rss_kib"]) / 1024
        md.append(f"| {r['system']} | {r['state']} | {fmt(rss)} | {fmt(hwm)} | "
                  f"{fmt(kids) if r['system'] == 'kcached' else '–'} |")
        emit("memory", r["system"], r["state"], "", "", "", "vmrss_mib", rss, "MiB")
        emit("memory", r["system"], r["state"], "", "", "", "vmhwm_mib", hwm, "MiB")
    md.append("")

    # 5. Command level.
    command = {}
    command_json = os.path.join(args.raw, "command.json")
    if os.path.exists(command_json):
        with open(command_json) as f:
            command = {r["command"]: r for r in json.load(f)["results"]}
    command_hits = {r["system"]: r for r in read_csv(os.path.join(args.raw, "command_hits.csv"))}
    md.append("## 5. Hit path, command level")
    md.append("")
    skipped = os.path.join(args.raw, "command.skipped")
    if command:
        base = command.get(KCACHE_COMMAND)
        runs = len(next(iter(command.values()))["times"])
        md.append("The whole command for one kernel already in every cache (saxpy: `tests/data/kernels/saxpy.ll` for "
                  "kcache, its CUDA source `bench/corpus/saxpy.cu` for nvcc), sm_90 cubin written to a file: process "
                  f"start, key, lookup, fetch, write. hyperfine, {runs} runs each after 5 warm-ups, no shell. `kcache "
                  "compile` answers from kcached's HTTP API without loading gRPC; the gRPC row is the same command "
                  "forced through kcache-grpc (plus the `env` it is started by).")
        md.append("")
        md.append("| command | median ms | mean ± sd ms | min ms | median / kcache compile |")
        md.append("|---|---|---|---|---|")
        for name, r in command.items():
            ratio = r["median"] / base["median"] if base else None
            md.append(f"| `{name}` | {fmt(r['median'] * 1e3, 2)} | {fmt(r['mean'] * 1e3, 2)} ± "
                      f"{fmt(r['stddev'] * 1e3, 2)} | {fmt(r['min'] * 1e3, 2)} | {fmt(ratio, 1)} |")
            emit("command", name, "hit", "", 1, "", "median_ms", r["median"] * 1e3, "ms")
            emit("command", name, "hit", "", 1, "", "mean_ms", r["mean"] * 1e3, "ms")
        md.append("")
        if command_hits:
            md.append("Hits counted by the caches themselves over the measured runs (warm-ups included): " +
                      "; ".join(f"{s}: {r['hits']} hits, {r['misses']} misses" for s, r in command_hits.items()) + ".")
            md.append("")
    elif os.path.exists(skipped):
        with open(skipped) as f:
            md.append(f"Not measured, missing: {f.read().strip()}.")
        md.append("")

    # Targets.
    lines = []

    def verdict(ok):
        return "PASS" if ok else "FAIL"

    def ratio_target(name, k, r, metric, limit, at_most, unit):
        # One PASS/FAIL line comparing kcached's `metric` with Redis's in the same run.
        if not (k and r):
            return lines.append(f"{name}: SKIP (not measured with both)")
        kv, rv = float(k[metric]), float(r[metric])
        ratio = kv / rv
        lines.append(f"{name}: {verdict(ratio <= limit if at_most else ratio >= limit)} "
                     f"({kv:,.1f}{unit} vs {rv:,.1f}{unit} = {ratio:.2f}x)")

    for system in ("kcached", "kcached-token"):
        who = "kcached" if system == "kcached" else "kcached with a token"
        for size, most in sorted(HIT_RATIO_MAX.items(), reverse=True):
            ratio_target(f"Target: {who}, hit {size_label(size)} p50 <= {most}x Redis GET p50 (1 client)",
                         by.get((system, size, 1)), by.get(("redis", size, 1)), "p50_us", most, True, " us")
        for size in sorted(HIT_RATIO_MAX, reverse=True):
            ratio_target(f"Target: {who}, 16 clients, {size_label(size)}: throughput >= {THROUGHPUT_RATIO_MIN}x Redis's",
                         by.get((system, size, 16)), by.get(("redis", size, 16)), "ops_per_s", THROUGHPUT_RATIO_MIN,
                         False, "/s")
    peak = [r for r in memory if r["system"] == "kcached" and r["state"].startswith("under hit-path load")]
    if peak:
        mib = int(peak[0]["vmrss_kib"]) / 1024
        lines.append(f"Target: kcached's peak RSS under the hit-path load <= {RSS_MAX_MIB} MiB: "
                     f"{verdict(mib <= RSS_MAX_MIB)} ({mib:.1f} MiB)")
    if coalesce:
        ok = all(int(r["compiles"]) == 1 and int(r["errors"]) == 0 for r in coalesce)
        detail = ", ".join(f"N={r['clients']}: {r['compiles']}" for r in coalesce)
        lines.append(f"Target: coalescing, exactly 1 compile for any N: {verdict(ok)} ({detail})")
    if len(counts) >= 2 and ("lookup", counts[0]) in sc and ("lookup", counts[-1]) in sc:
        lo, hi = float(sc[("lookup", counts[0])]["p50_us"]), float(sc[("lookup", counts[-1])]["p50_us"])
        lines.append(f"Target: Lookup p50 (through kcached) at {count_label(counts[-1])} entries <= {SCALE_RATIO_MAX}x that "
                     f"at {count_label(counts[0])}: {verdict(hi / lo <= SCALE_RATIO_MAX)} "
                     f"({hi:.1f} us vs {lo:.1f} us = {hi / lo:.2f}x)")
        slo, shi = store.get(counts[0], {}).get("StoreList/present"), store.get(counts[-1], {}).get("StoreList/present")
        if slo and shi:
            lines.append(f"Info: Store::list at {count_label(counts[-1])} / at {count_label(counts[0])} entries "
                         f"(store API, no gRPC): {shi / slo:.2f}x ({shi / 1e3:.2f} us vs {slo / 1e3:.2f} us)")
    else:
        lines.append("Target: Lookup p50 at 10^6 within 2x of 10^3: SKIP (fewer than two entry counts)")

    base = command.get(KCACHE_COMMAND)
    for name, minimum in (("ccache nvcc -c", CCACHE_RATIO_MIN), ("sccache nvcc -c", SCCACHE_RATIO_MIN)):
        other = command.get(name)
        if base and other:
            ratio = other["median"] / base["median"]
            hits = command_hits.get(name.split()[0], {})
            clean = not hits or int(hits.get("misses", 0)) == 0
            lines.append(f"Target: command-level hit >= {minimum:g}x faster than `{name}` hit: "
                         f"{verdict(ratio >= minimum and clean)} ({base['median'] * 1e3:.2f} ms vs "
                         f"{other['median'] * 1e3:.2f} ms = {ratio:.1f}x{'' if clean else '; it missed, not comparable'})")
        else:
            lines.append(f"Target: command-level hit >= {minimum:g}x faster than `{name}`: SKIP (not measured)")
    md.append("## Targets")
    md.append("")
    text = "\n".join(md + lines + [""])
    # In the file, each target line ends with two spaces: a Markdown line break.
    md_text = "\n".join(md + [line + "  " for line in lines] + [""])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "compare.md"), "w") as f:
        f.write(md_text)
    with open(os.path.join(args.out, "compare.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["bench", "system", "op", "size_bytes", "clients", "entries", "metric", "value", "unit"])
        for row in long_rows:
            w.writerow(row[:7] + [f"{row[7]:.6g}"] + row[8:])
    plot(args, by, sizes, sc, store, counts, coalesce)
    print(text)


def plot(args, by, sizes, sc, store, counts, coalesce):
    """compare.png through gnuplot (bench/plot.gp); skipped with a note where gnuplot is absent."""
    gnuplot = shutil.which("gnuplot")
    if not gnuplot:
        print("(gnuplot not installed: no compare.png; apt-get install gnuplot-nox)", file=sys.stderr)
        return
    if not by:
        print("(no hit-path measurements in this run: no compare.png)", file=sys.stderr)
        return
    data = os.path.join(args.raw, "plot")
    os.makedirs(data, exist_ok=True)

    def val(row, key):
        return row[key] if row else "NaN"

    with open(os.path.join(data, "hit.dat"), "w") as f:
        f.write("# size_kib kc1_p50 redis1_p50 kc16_p50 redis16_p50 kc16_mibs redis16_mibs label\n")
        for s in sizes:
            k1, r1 = by.get(("kcached", s, 1)), by.get(("redis", s, 1))
            k16, r16 = by.get(("kcached", s, 16)), by.get(("redis", s, 16))
            f.write(f"{s / 1024} {val(k1, 'p50_us')} {val(r1, 'p50_us')} {val(k16, 'p50_us')} {val(r16, 'p50_us')} "
                    f"{val(k16, 'mib_per_s')} {val(r16, 'mib_per_s')} \"{size_label(s)}\"\n")
    with open(os.path.join(data, "scale.dat"), "w") as f:
        f.write("# entries lookup_p50 fetch_p50 store_list_us store_get_us\n")
        for n in counts:
            lst = store.get(n, {}).get("StoreList/present")
            get = store.get(n, {}).get("StoreGet")
            f.write(f"{n} {val(sc.get(('lookup', n)), 'p50_us')} {val(sc.get(('fetch', n)), 'p50_us')} "
                    f"{lst / 1e3 if lst else 'NaN'} {get / 1e3 if get else 'NaN'}\n")
    with open(os.path.join(data, "coalesce.dat"), "w") as f:
        f.write("# clients wall_ms compiles\n")
        for r in coalesce:
            f.write(f"{r['clients']} {r['wall_ms']} {r['compiles']}\n")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot.gp")
    out = os.path.join(args.out, "compare.png")
    subprocess.run([gnuplot, "-e", f"dir='{data}'; out='{out}'", script], check=True)


if __name__ == "__main__":
    main()
