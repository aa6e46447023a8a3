# Helpers for bench/run.sh (sourced): start and stop kcached and redis-server on free loopback
# ports, read a process's memory. Every process started here is recorded in $work/pids and
# stopped by bench_cleanup, which run.sh calls from its EXIT trap.

# A TCP port on 127.0.0.1 that nothing listens on now (redis-server cannot pick its own).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_kcached DB NAME [FLAG...]: starts kcached on DB (with the extra flags), serving the HTTP
# image API too as deployed, waits for its port; sets kcached_pid, kcached_addr.
start_kcached() {
  local db=$1 name=$2
  shift 2
  rm -f "$work/$name.port"
  "$build/server/kcached" --listen 127.0.0.1:0 --db "$db" --port-file "$work/$name.port" --log-level warn \
    --http-listen 127.0.0.1:0 "$@" \
    >/dev/null 2>"$work/$name.log" &
  kcached_pid=$!
  echo "$kcached_pid" >>"$work/pids"
  local i
  for i in $(seq 1 3000); do
    [ -s "$work/$name.port" ] && break
    kill -0 "$kcached_pid" 2>/dev/null || { echo "kcached did not start:" >&2; tail "$work/$name.log" >&2; return 1; }
    sleep 0.01
  done
  kcached_addr=127.0.0.1:$(cat "$work/$name.port")
}

# stop_kcached: SIGTERM, and wait for the clean shutdown (which flushes RocksDB).
stop_kcached() {
  stop_pid "$kcached_pid"
}

# stop_pid PID: stops a process started here, waits for it, and forgets it (so the cleanup never
# signals a process id the system has given to someone else since).
stop_pid() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  sed -i "/^$1\$/d" "$work/pids"
}

# start_redis: an in-memory redis-server (no snapshots, no AOF) on a free loopback port; sets
# redis_pid, redis_port.
start_redis() {
  redis_port=$(free_port)
  redis-server --bind 127.0.0.1 --port "$redis_port" --save '' --appendonly no --daemonize no \
    --dir "$work" --logfile "$work/redis.log" &
  redis_pid=$!
  echo "$redis_pid" >>"$work/pids"
  local i
  for i in $(seq 1 500); do
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 && return 0
    kill -0 "$redis_pid" 2>/dev/null || break
    sleep 0.01
  done
  echo "redis-server did not start:" >&2
  tail "$work/redis.log" >&2
  return 1
}

stop_redis() {
  stop_pid "$redis_pid"
}

# memory_row SYSTEM STATE PID [RSS_KIB]: appends "system,state,vmrss_kib,vmhwm_kib,children_rss_kib"
# to memory.csv; VmRSS now unless RSS_KIB (a sampled peak) is given. Children: kcached's compile
# workers, separate processes, reported apart.
memory_row() {
  local system=$1 state=$2 pid=$3 rss=${4:-} hwm children=0 c r
  [ -n "$rss" ] || rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
  hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status")
  for c in $(pgrep -P "$pid" || true); do
    r=$(awk '/^VmRSS:/ {print $2}' "/proc/$c/status" 2>/dev/null || echo 0)
    children=$((children + ${r:-0}))
  done
  echo "$system,$state,$rss,$hwm,$children" >>"$raw/memory.csv"
}

# sample_rss PID FILE: writes the highest VmRSS seen into FILE every 0.1 s until stopped (the
# peak under load; VmHWM would also remember earlier phases). Run it in the background and
# record its pid: start_sampler PID FILE sets sampler_pid.
start_sampler() {
  echo 0 >"$2"
  sample_rss "$1" "$2" &
  sampler_pid=$!
  echo "$sampler_pid" >>"$work/pids"
}
sample_rss() {
  local pid=$1 file=$2 peak=0 rss
  while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo 0)
    [ "${rss:-0}" -gt "$peak" ] && peak=$rss && echo "$peak" >"$file"
    sleep 0.1
  done
}

# du_bytes DIR: bytes the folder takes on disk (allocated blocks).
du_bytes() { du -s --block-size=1 "$1" | cut -f1; }

bench_cleanup() {
  local pid
  if [ -f "$work/pids" ]; then
    while read -r pid; do kill "$pid" 2>/dev/null || true; done <"$work/pids"
    while read -r pid; do wait "$pid" 2>/dev/null || true; done <"$work/pids"
  fi
  if [ "${KCACHE_BENCH_KEEP:-0}" = 1 ]; then
    echo "kept $work (raw measurements in raw/, daemon logs)" >&2
  else
    rm -rf "$work"
  fi
}
