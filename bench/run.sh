#!/usr/bin/env bash
# kcache beside what people use today, in one run (bench/README.md says what each part means):
#   1. hit path: Fetch of 4 KiB..16 MiB images through libkcache from a real kcached, with 1 and
#      16 clients, beside GET of the same bytes from a local redis-server (the floor of a
#      networked key-value fetch), through the same threaded harness;
#   2. coalescing: N identical concurrent compiles (N = 1, 8, 64), each N on a fresh database;
#   3. scale: Lookup and Fetch latency with 10^3, 10^5, 10^6 small entries in the store, through
#      the daemon and at the store API; bytes on disk per entry;
#   4. memory: kcached's VmRSS / VmHWM idle, with 10^6 entries, under the load of (1);
#   5. command-level hit: the whole `kcache compile` of a cached kernel (process start, key,
#      fetch, writing the file) beside `ccache nvcc -c` and `sccache nvcc -c` hits of the same
#      kernel's CUDA source, with hyperfine (skipped, and said so, without them or nvcc).
# Writes bench/results/compare.{md,csv,png}, prints the table and the PASS/FAIL lines, and renders
# bench/README.md (bench/render_readme.py).
#
# Usage: bench/run.sh [build-dir]   (default build/; needs `ninja -C BUILD kcache_bench`)
# Builds nothing. Starts its own kcached and redis-server on free loopback ports with temporary
# databases and stops them on exit. Knobs (environment):
#   KCACHE_BENCH_SCALE="1000 100000 1000000"  entry counts for (3); fewer for a quick run
#   KCACHE_BENCH_MEASURE_MS=2000              measured window per load measurement
#   KCACHE_BENCH_SIZES=4K,64K,1M,16M          hit-path image sizes
#   KCACHE_BENCH_COALESCE="1 8 64"            client counts for (2)
#   KCACHE_BENCH_KERNELS=100                  kernels in the module compiled for (2)
#   KCACHE_BENCH_ROUNDS=3                     rounds of (1) and (3); the report takes the median
#   KCACHE_BENCH_OUT=bench/results            where the md/csv/png go
#   KCACHE_BENCH_KEEP=1                       keep the temp folder (raw CSVs, daemon logs)
#   KCACHE_BENCH_NOTE="..."                   a sentence for the md file (e.g. what else ran)
#   KCACHE_BENCH_PARTS="hit coalesce scale command"  which parts to run (memory comes with hit/scale)
#   KCACHE_BENCH_COMMAND_RUNS=100             hyperfine runs per command in (5)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
scale_counts=${KCACHE_BENCH_SCALE:-1000 100000 1000000}
measure_ms=${KCACHE_BENCH_MEASURE_MS:-2000}
sizes=${KCACHE_BENCH_SIZES:-4K,64K,1M,16M}
coalesce_counts=${KCACHE_BENCH_COALESCE:-1 8 64}
kernels=${KCACHE_BENCH_KERNELS:-100}
rounds=${KCACHE_BENCH_ROUNDS:-3}
out_dir=${KCACHE_BENCH_OUT:-$root/bench/results}
parts=" ${KCACHE_BENCH_PARTS:-hit coalesce scale command} "
command_runs=${KCACHE_BENCH_COMMAND_RUNS:-100}
hit_keys=8
bin=$build/bench

for tool in kcache_bench_populate kcache_bench_load kcache_bench_coalesce kcache_bench_store; do
  [ -x "$bin/$tool" ] || { echo "run.sh: $bin/$tool is missing: ninja -C $build kcache_bench" >&2; exit 1; }
done
[ -x "$build/server/kcached" ] || { echo "run.sh: $build/server/kcached is missing" >&2; exit 1; }
have_redis=1
command -v redis-server >/dev/null && command -v redis-cli >/dev/null || {
  have_redis=0
  echo "run.sh: redis-server not installed (apt-get install redis-server): kcached is measured alone" >&2
}

work=$(mktemp -d "${TMPDIR:-/tmp}/kcache-bench.XXXXXX")
raw=$work/raw
mkdir -p "$raw" "$out_dir"
touch "$work/pids"
# shellcheck source=bench/lib.sh
source "$root/bench/lib.sh"
trap bench_cleanup EXIT
trap 'exit 130' INT TERM

say() { echo "== $*" >&2; }
load() { "$bin/kcache_bench_load" --measure-ms "$measure_ms" "$@"; }
run_started=$(date +%s)

echo "system,state,vmrss_kib,vmhwm_kib,children_rss_kib" >"$raw/memory.csv"

part() { [[ $parts == *" $1 "* ]]; }

# --- 4a. memory, idle: a daemon on an empty database, and an empty redis-server -------------
if part hit; then
say "memory: idle"
start_kcached "$work/db.idle" idle
sleep 1
memory_row kcached idle "$kcached_pid"
stop_kcached
if [ $have_redis = 1 ]; then
  start_redis
  memory_row redis idle "$redis_pid"
fi

# --- 1. hit path --------------------------------------------------------------------------
say "hit path: writing $hit_keys entries of each size ($sizes) through the store API"
"$bin/kcache_bench_populate" --db "$work/db.hit" --hit-sizes "$sizes" --hit-keys $hit_keys >/dev/null
start_kcached "$work/db.hit" hit
start_sampler "$kcached_pid" "$work/kcached.peak"
kcached_sampler=$sampler_pid
hit_pid=$kcached_pid hit_addr=$kcached_addr
# The same load on a daemon that checks a token on every call (its own copy of the entries: one
# RocksDB has one daemon), for the 4 KiB and 64 KiB targets.
token_sizes=$(echo "$sizes" | tr ',' '\n' | grep -xE '4K|64K' | paste -sd, -)
if [ -n "$token_sizes" ]; then
  "$bin/kcache_bench_populate" --db "$work/db.token" --hit-sizes "$token_sizes" --hit-keys $hit_keys >/dev/null
  echo "bench-token-0123456789abcdef0123456789" >"$work/token"
  echo "bench read bench-token-0123456789abcdef0123456789" >"$work/tokens"
  chmod 600 "$work/tokens" "$work/token"
  start_kcached "$work/db.token" token --tokens-file "$work/tokens"
  token_addr=$kcached_addr token_pid=$kcached_pid
fi
kcached_pid=$hit_pid kcached_addr=$hit_addr
if [ $have_redis = 1 ]; then
  start_sampler "$redis_pid" "$work/redis.peak"
  redis_sampler=$sampler_pid
fi
"$bin/kcache_bench_load" --header >"$raw/hit.csv"
# Size by size, kcached then Redis, round after round (the report takes the median of the
# rounds), so both see the same background load on a shared machine. GetStats, which touches no
# store, gives the floor of one gRPC round trip to kcached.
for round in $(seq 1 "$rounds"); do
  say "hit path: kcached GetStats, the gRPC floor (round $round of $rounds)"
  load --system kcached --server "$kcached_addr" --op stats --sizes 0 --clients 1,16 >>"$raw/hit.csv"
  for size in ${sizes//,/ }; do
    say "hit path: $size, kcached Fetch (round $round of $rounds)"
    load --system kcached --server "$kcached_addr" --op fetch --sizes "$size" --clients 1,16 \
      --hit-keys $hit_keys >>"$raw/hit.csv"
    if [[ ",$token_sizes," == *",$size,"* ]]; then
      say "hit path: $size, kcached Fetch with a token (round $round of $rounds)"
      load --system kcached --label kcached-token --server "$token_addr" --token-file "$work/token" --op fetch \
        --sizes "$size" --clients 1,16 --hit-keys $hit_keys >>"$raw/hit.csv"
    fi
    if [ $have_redis = 1 ]; then
      say "hit path: $size, Redis GET (round $round of $rounds)"
      load --system redis --redis-port "$redis_port" --op get --load --sizes "$size" --clients 1,16 \
        --hit-keys $hit_keys >>"$raw/hit.csv"
    fi
  done
done
stop_pid "$kcached_sampler"
memory_row kcached "under hit-path load (peak)" "$kcached_pid" "$(cat "$work/kcached.peak")"
stop_kcached
if [ -n "$token_sizes" ]; then
  stop_pid "$token_pid"
  rm -rf "$work/db.token"
fi
if [ $have_redis = 1 ]; then
  stop_pid "$redis_sampler"
  memory_row redis "under hit-path load (peak)" "$redis_pid" "$(cat "$work/redis.peak")"
  stop_redis
fi
rm -rf "$work/db.hit"
fi

# --- 2. coalescing ------------------------------------------------------------------------
echo "clients,wall_ms,compiles,misses,coalesced,hits,errors" >"$raw/coalesce.csv"
part coalesce || coalesce_counts=""
for n in $coalesce_counts; do
  say "coalescing: $n identical compiles ($kernels kernels, fresh database)"
  start_kcached "$work/db.coalesce.$n" "coalesce.$n"
  "$bin/kcache_bench_coalesce" --server "$kcached_addr" --clients "$n" --kernels "$kernels" >>"$raw/coalesce.csv"
  stop_kcached
  rm -rf "$work/db.coalesce.$n"
done

# --- 5. command-level hit -------------------------------------------------------------------
# Run before (3), whose million-entry databases leave the disk and page cache busy for a while.
# One kernel, cached everywhere first: kcache (its first compile is the miss that also makes the
# CLI remember the daemon), ccache and sccache (a first run each). Then hyperfine runs each
# command $command_runs times, interleaved by hyperfine's order within one run. The hit counters
# of ccache and sccache are read after, to show every measured run was a hit.
nvcc=/usr/local/cuda/bin/nvcc
if part command; then
  missing=""
  for tool in hyperfine ccache sccache; do command -v $tool >/dev/null || missing="$missing $tool"; done
  [ -x "$nvcc" ] || missing="$missing nvcc(/usr/local/cuda)"
  if [ -n "$missing" ]; then
    echo "run.sh: command-level hit skipped, missing:$missing (apt-get install hyperfine ccache sccache)" >&2
    echo "$missing" >"$raw/command.skipped"
  else
    say "command-level hit: kcache compile vs ccache / sccache nvcc -c ($command_runs runs each)"
    start_kcached "$work/db.command" command
    export KCACHE_STATE_DIR=$work/state CCACHE_DIR=$work/ccache SCCACHE_DIR=$work/sccache
    export CCACHE_NOHASHDIR=1 SCCACHE_IDLE_TIMEOUT=0 PATH=/usr/local/cuda/bin:$PATH
    src_ll=$root/tests/data/kernels/saxpy.ll src_cu=$root/bench/corpus/saxpy.cu
    kc="$build/client/kcache --server $kcached_addr compile $src_ll --arch sm_90 --emit cubin -o $work/k.cubin"
    cc="ccache $nvcc -c -arch=sm_90 $src_cu -o $work/c.o"
    sc="sccache $nvcc -c -arch=sm_90 $src_cu -o $work/s.o"
    $kc >/dev/null && $cc && $sc
    ccache -z >/dev/null; sccache -z >/dev/null
    hyperfine -N --style none --warmup 5 --runs "$command_runs" --export-json "$raw/command.json" \
      -n "kcache compile" "$kc" -n "kcache-grpc compile (gRPC, no fast path)" "env KCACHE_FAST_PATH=0 $kc" \
      -n "ccache nvcc -c" "$cc" -n "sccache nvcc -c" "$sc" >&2
    {
      echo "system,hits,misses"
      ccache --print-stats | awk -F'\t' '$1=="direct_cache_hit"{d=$2} $1=="preprocessed_cache_hit"{p=$2} $1=="cache_miss"{m=$2} END{print "ccache," d+p "," m}'
      sccache --show-stats --stats-format json | python3 -c 'import json,sys; s=json.load(sys.stdin)["stats"]; print("sccache,%d,%d" % (sum(s["cache_hits"]["counts"].values()), sum(s["cache_misses"]["counts"].values())))'
    } >"$raw/command_hits.csv"
    sccache --stop-server >/dev/null 2>&1 || true
    stop_kcached
  fi
fi

# --- 3. scale, and 4b. memory with many entries --------------------------------------------
# Every database is written first; then one daemon per database, all running, and the Lookup /
# Fetch measurements go round-robin over them for $rounds rounds (the report takes the median),
# so a burst of background load on a shared machine does not land on one entry count alone.
echo "entries,payload_bytes,populate_s,du_after_populate,du_after_daemon" >"$raw/disk.csv"
"$bin/kcache_bench_load" --header >"$raw/scale.csv"
declare -A scale_pid scale_addr scale_payload scale_seconds scale_du
part scale || scale_counts=""
for n in $scale_counts; do
  db=$work/db.scale.$n
  say "scale: writing $n entries (1-4 KiB PTX images) through the store API"
  populated=$("$bin/kcache_bench_populate" --db "$db" --scale-entries "$n")  # entries,payload,seconds
  IFS=, read -r _ scale_payload[$n] scale_seconds[$n] <<<"$populated"
  scale_du[$n]=$(du_bytes "$db")  # the populate tool flushed and closed the store
  say "scale: store API at $n entries (Google Benchmark)"
  "$bin/kcache_bench_store" --db "$db" --entries "$n" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_min_time=0.3 \
    --benchmark_out="$raw/store.$n.json" --benchmark_out_format=json >/dev/null 2>"$work/store.$n.log" ||
    { cat "$work/store.$n.log" >&2; exit 1; }
done
for n in $scale_counts; do
  start_kcached "$work/db.scale.$n" "scale.$n"
  scale_pid[$n]=$kcached_pid
  scale_addr[$n]=$kcached_addr
done
for round in $(seq 1 "$rounds"); do
  for n in $scale_counts; do
    say "scale: kcached Lookup and Fetch at $n entries (round $round of $rounds)"
    load --system kcached --server "${scale_addr[$n]}" --op lookup --scale-entries "$n" --clients 1 >>"$raw/scale.csv"
    load --system kcached --server "${scale_addr[$n]}" --op fetch --scale-entries "$n" --clients 1 >>"$raw/scale.csv"
  done
done
for n in $scale_counts; do
  memory_row kcached "$n entries (after lookups and fetches)" "${scale_pid[$n]}"
  stop_pid "${scale_pid[$n]}"
  echo "$n,${scale_payload[$n]},${scale_seconds[$n]},${scale_du[$n]},$(du_bytes "$work/db.scale.$n")" >>"$raw/disk.csv"
  rm -rf "$work/db.scale.$n"
done

# --- report -------------------------------------------------------------------------------
python3 "$root/bench/report.py" --raw "$raw" --out "$out_dir" --measure-ms "$measure_ms" \
  --kernels "$kernels" --seconds "$(($(date +%s) - run_started))" --redis "$have_redis" \
  --commit "$(git -C "$root" describe --always --dirty 2>/dev/null || echo '(not a git checkout)')"
# bench/README.md shows the new results (only when they went to bench/results).
python3 "$root/bench/render_readme.py" --after-run "$out_dir"
