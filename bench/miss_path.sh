#!/usr/bin/env bash
# Miss path: cold compiles of the test kernel corpus (tests/data/kernels, sm_90, PTX + cubin)
#   1. through kcached (a fresh database each round; one `kcache compile` per kernel),
#   2. with the bare toolchain as processes: llvm-link (rtlib, libdevice) -> opt -O2 -> llc -> ptxas,
#   3. with nvcc -cubin on the CUDA sources of the same kernels (bench/corpus).
# Reports the median of ROUNDS rounds and the ratios, measured in this run on this machine.
# Usage: bench/miss_path.sh [build-dir]   (ROUNDS=5 by default)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
rounds=${ROUNDS:-5}
arch=sm_90
cuda=/usr/local/cuda
llvm_bin=$(llvm-config-22 --bindir 2>/dev/null || echo /usr/lib/llvm-22/bin)
out_dir=$root/bench/results
mkdir -p "$out_dir"
work=$(mktemp -d)
trap 'kill $(cat "$work/pid" 2>/dev/null) 2>/dev/null || true; rm -rf "$work"' EXIT

[ -x "$cuda/bin/ptxas" ] || { echo "miss_path: needs the CUDA toolkit at $cuda (ptxas, nvcc)" >&2; exit 1; }
kernels=(saxpy reduce_shared throw alloc expf)

now_ms() { python3 -c 'import time; print(f"{time.perf_counter()*1000:.3f}")'; }
median() { python3 -c 'import sys, statistics; print(f"{statistics.median(map(float, sys.argv[1:])):.1f}")' "$@"; }

kcache_round() {
  local db=$work/db.$1
  "$build/server/kcached" --listen 127.0.0.1:0 --db "$db" --port-file "$work/port.$1" --log-level warn \
    >/dev/null 2>"$work/kcached.log" &
  echo $! >"$work/pid"
  while [ ! -s "$work/port.$1" ]; do sleep 0.01; done  # start-up is not what is measured
  local server=127.0.0.1:$(cat "$work/port.$1")
  local start end
  start=$(now_ms)
  for k in "${kernels[@]}"; do
    "$build/client/kcache" --server "$server" compile "$root/tests/data/kernels/$k.ll" --arch $arch \
      --emit ptx,cubin --out-dir "$work/kc.$k" >/dev/null
  done
  end=$(now_ms)
  kill "$(cat "$work/pid")"; wait "$(cat "$work/pid")" 2>/dev/null || true
  python3 -c "print($end - $start)"
}

bare_round() {
  local start end
  start=$(now_ms)
  for k in "${kernels[@]}"; do
    local libs=("$build/rtlib/rtlib.bc")
    [ "$k" = expf ] && libs+=("$cuda/nvvm/libdevice/libdevice.10.bc")
    "$llvm_bin/llvm-link" --only-needed "$root/tests/data/kernels/$k.ll" "${libs[@]}" -o "$work/$k.linked.bc" 2>/dev/null
    "$llvm_bin/opt" -O2 -mtriple=nvptx64-nvidia-cuda -mcpu=$arch "$work/$k.linked.bc" -o "$work/$k.opt.bc"
    "$llvm_bin/llc" -O2 -mcpu=$arch -mattr=+ptx90 "$work/$k.opt.bc" -o "$work/$k.ptx"
    "$cuda/bin/ptxas" -arch=$arch -O2 "$work/$k.ptx" -o "$work/$k.cubin"
  done
  end=$(now_ms)
  python3 -c "print($end - $start)"
}

nvcc_round() {
  local start end
  start=$(now_ms)
  for k in "${kernels[@]}"; do
    "$cuda/bin/nvcc" -cubin -arch=$arch -O3 "$root/bench/corpus/$k.cu" -o "$work/$k.nvcc.cubin"
  done
  end=$(now_ms)
  python3 -c "print($end - $start)"
}

declare -a kc bare nv
for r in $(seq 1 "$rounds"); do
  kc+=("$(kcache_round "$r")")
  bare+=("$(bare_round)")
  nv+=("$(nvcc_round)")
done
kc_ms=$(median "${kc[@]}"); bare_ms=$(median "${bare[@]}"); nv_ms=$(median "${nv[@]}")
ratio_bare=$(python3 -c "print(f'{$kc_ms / $bare_ms:.2f}')")
ratio_nvcc=$(python3 -c "print(f'{$kc_ms / $nv_ms:.2f}')")
verdict=$(python3 -c "print('PASS' if $kc_ms <= $bare_ms else 'FAIL')")

{
  echo "| ${#kernels[@]} kernels, $arch, PTX + cubin, cold | median ms ($rounds rounds) | kcache / this |"
  echo "|---|---|---|"
  echo "| kcache (kcached miss, one \`kcache compile\` each) | $kc_ms | 1.00 |"
  echo "| bare toolchain (llvm-link, opt -O2, llc, ptxas) | $bare_ms | $ratio_bare |"
  echo "| nvcc -cubin (CUDA sources) | $nv_ms | $ratio_nvcc |"
  echo
  echo "Target: miss path <= 1.0x the bare toolchain: $verdict ($ratio_bare)"
} | tee "$out_dir/miss_path.md"
{
  echo "run,kcache_ms,bare_ms,nvcc_ms"
  for i in $(seq 0 $((rounds - 1))); do echo "$((i + 1)),${kc[$i]},${bare[$i]},${nv[$i]}"; done
} >"$out_dir/miss_path.csv"
