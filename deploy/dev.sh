#!/usr/bin/env bash
# The README's quick start. `deploy/dev.sh serve` installs what is missing, builds, and runs
# kcached on localhost with its RocksDB under ./var/kcache; `deploy/dev.sh test` installs, builds
# and runs the whole test suite through ctest.
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
    exec "$build_dir/server/kcached" --listen "${KCACHE_LISTEN:-127.0.0.1:7878}" --db var/kcache "$@"
    ;;
  test)
    shift
    setup
    cd "$build_dir"
    # --output-on-failure shows a failing test's log; ctest prints the pass/fail summary last.
    exec ctest --output-on-failure -j"$(nproc)" "$@"
    ;;
  *)
    echo "usage: deploy/dev.sh serve [kcached flags...] | test [ctest flags...]" >&2
    exit 2
    ;;
esac
