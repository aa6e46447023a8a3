#!/usr/bin/env bash
# Prepares the images the GPU test loads (through a temporary kcached), then runs it.
# Usage: tests/gpu/run.sh BUILD_DIR [IMAGES_DIR]. Exits 77 (skipped) where no CUDA driver is.
# On a GPU machine without this project's build tools: prepare here, carry IMAGES_DIR and the
# statically linked kcache_gpu_test there, run `kcache_gpu_test IMAGES_DIR`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:?usage: run.sh BUILD_DIR [IMAGES_DIR]}
images=${2:-$(mktemp -d)}
work=$(mktemp -d)
# Stops kcached and waits for it (it writes to $work until it has exited), keeping the exit status.
stop() {
  local pid
  pid=$(cat "$work/pid" 2>/dev/null) || true
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work" || true
}
trap stop EXIT

"$build/server/kcached" --listen 127.0.0.1:0 --db "$work/db" --port-file "$work/port" --log-level warn \
  >/dev/null 2>"$work/kcached.log" &
echo $! >"$work/pid"
# Until it has written its port: a kcached that dies instead ends this script (with its log).
while [ ! -s "$work/port" ]; do
  if ! kill -0 "$(cat "$work/pid")" 2>/dev/null; then cat "$work/kcached.log" >&2; exit 1; fi
  sleep 0.01
done
kcache() { "$build/client/kcache" --server "127.0.0.1:$(cat "$work/port")" "$@"; }

kernels=$root/tests/data/kernels
# Images for this machine's driver (nvidia-smi's "CUDA Version"): PTX at an ISA it JITs, and PTX
# in the cubin's place where it cannot load this toolkit's cubins (the loader takes either).
driver=$(nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9.]*\).*/\1/p' | head -n 1) || true
for_driver=()
if [ -n "$driver" ]; then for_driver=(--driver "$driver"); fi
kcache compile "$kernels/saxpy.ll" --arch sm_80 "${for_driver[@]}" -o "$images/saxpy.sm_80.ptx" >/dev/null
kcache compile "$kernels/throw.ll" --arch sm_80 "${for_driver[@]}" -o "$images/throw.sm_80.ptx" >/dev/null
if kcache --json capabilities | grep -q '"cuda_present":true'; then
  for arch in sm_80 sm_90; do
    kcache compile "$kernels/saxpy.ll" --arch $arch --emit cubin "${for_driver[@]}" -o "$images/saxpy.$arch.cubin" >/dev/null
  done
fi
# Not `exec`: that would replace this shell, and its EXIT trap would never stop the daemon.
status=0
"$build/tests/kcache_gpu_test" "$images" || status=$?
exit $status
