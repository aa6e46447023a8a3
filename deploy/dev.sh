#!/usr/bin/env bash
# The README's quick start. `deploy/dev.sh serve` installs what is missing, builds, and runs
# kcached on localhost with its RocksDB under ./var/kcache; `deploy/dev.sh test` installs, builds
# and runs the whole test suite through ctest, then builds again with clang under
# AddressSanitizer and UndefinedBehaviorSanitizer (build-asan/) and runs the unit, integration
# and fuzz tests there (KCACHE_SANITIZERS=0 skips that second pass).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

build_dir=${KCACHE_BUILD_DIR:-build}
build_type=${KCACHE_BUILD_TYPE:-RelWithDebInfo}

setup() {
  bash deploy/install-deps.sh
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" >/dev/null
  cmake --build "$build_dir"
}

case "${1:-}" in
  serve)
    shift
    setup
    mkdir -p var/kcache
    # The HTTP image API (the fast cached compile) follows on the next port, 7879, by default.
    exec "$build_dir/server/kcached" --listen "${KCACHE_LISTEN:-127.0.0.1:7878}" \
      ${KCACHE_HTTP_LISTEN:+--http-listen "$KCACHE_HTTP_LISTEN"} --db var/kcache "$@"
    ;;
  test)
    shift
    setup
    # --output-on-failure shows a failing test's log; ctest prints the pass/fail summary last.
    status=0
    (cd "$build_dir" && ctest --output-on-failure -j"$(nproc)" "$@") || status=$?
    if [ "${KCACHE_SANITIZERS:-1}" != 0 ]; then
      echo "== the same tests under AddressSanitizer + UndefinedBehaviorSanitizer, and the fuzzers =="
      CC=clang-22 CXX=clang++-22 cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        -DKCACHE_SANITIZE=ON -DKCACHE_FUZZ=ON -DKCACHE_BENCH=OFF -DKCACHE_CUDA_CORPUS=OFF >/dev/null
      cmake --build build-asan
      (cd build-asan && ctest --output-on-failure -j"$(nproc)" -L 'unit|integration|fuzz' "$@") || status=$?
    fi
    exit "$status"
    ;;
  *)
    echo "usage: deploy/dev.sh serve [kcached flags...] | test [ctest flags...]" >&2
    exit 2
    ;;
esac
