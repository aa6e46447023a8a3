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

# phase NAME DIR COMMAND...: runs COMMAND and appends "NAME<TAB>seconds" to DIR/kcache-phases.tsv,
# which deploy/build-profile.sh prints beside Ninja's and ctest's own timings.
phase() {
  local name=$1 dir=$2 start status=0
  shift 2
  start=$(date +%s)
  "$@" || status=$?
  mkdir -p "$dir"
  printf '%s\t%s\n' "$name" $(($(date +%s) - start)) >> "$dir/kcache-phases.tsv"
  return "$status"
}

setup() {
  bash deploy/install-deps.sh
  rm -f "$build_dir/kcache-phases.tsv"
  phase configure "$build_dir" cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" >/dev/null
  phase build "$build_dir" cmake --build "$build_dir"
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
    phase test "$build_dir" bash -c 'cd "$1" && shift && ctest --output-on-failure -j"$(nproc)" "$@"' _ "$build_dir" "$@" ||
      status=$?
    if [ "${KCACHE_SANITIZERS:-1}" != 0 ]; then
      echo "== the same tests under AddressSanitizer + UndefinedBehaviorSanitizer, and the fuzzers =="
      # -O1 with line tables, as sanitizer builds usually are: the reports keep file:line, and the
      # pass compiles in about half the time of -O2 -g. The CUDA corpus and bench/ are left out
      # (CorpusParity and CorpusTimeLimit report themselves skipped, saying so).
      rm -f build-asan/kcache-phases.tsv
      phase configure build-asan env CC=clang-22 CXX=clang++-22 cmake -S . -B build-asan -G Ninja \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
        -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DKCACHE_SANITIZE=ON -DKCACHE_FUZZ=ON \
        -DKCACHE_BENCH=OFF -DKCACHE_CUDA_CORPUS=OFF >/dev/null
      phase build build-asan cmake --build build-asan || status=$?
      # How much of both builds ccache answered (deploy/build-profile.sh tells where the time went).
      if command -v ccache >/dev/null; then ccache --show-stats | sed -n '/^Cacheable/,/^Uncacheable/p'; fi
      # Left out of this pass: suites whose work is the toolchain's (LLVM's tools and libLLVM,
      # neither instrumented) over many modules, through daemon code the kept tests run too.
      skip=(
        # ~110 bare-toolchain runs (llvm-link, opt, llc, ld.lld as processes) and as many AMD
        # compiles; HipParity.BitcodeForAnotherGfx* and Amd.* keep the AMD path under ASan.
        HipParity.KcacheAcceptsEveryModuleTheBareToolchainAccepts
        # llvm-readobj, llvm-objdump and llvm-nm on every AMD corpus module; the daemon's side of
        # it is Amd.MatchesTheReferenceToolchainRunAsProcesses's, which stays.
        Amd.EveryModuleBecomesCodeObjectsThatLlvmReadsAndDisassembles
        # The launcher's CMake and Ninja builds of its 7-file project: about 150 nvcc and clang
        # compiles through the same daemon code (steps looked up, run, stored, coalesced; host
        # objects offered and checked) that Launcher.Odd*Commands* (misses, hits, host objects,
        # failed steps, uncacheable reports, for nvcc and clang), BadInput.EachBadBuildStep* and
        # Steps.* keep under ASan; the remote tier stays there through Fleet.*.
        Launcher.ACmakeBuildSharesEveryStepAcrossTheFleetAndNeverServesAStaleObject
        Launcher.AClangBuildSharesEachArchsDeviceCompileAcrossTheFleet
        # The launcher's corpus: about 130 plain nvcc and clang++ runs to compare with, and the
        # nine-arch CMake project built twice, for the same launcher and daemon code that
        # LauncherCorpus.AUnitsModuleIdIsItsOwn and .AnyCompiler* keep under ASan.
        LauncherCorpus.RealCommandLinesGiveWhatNvccGives
        LauncherCorpus.ClangCommandLinesGiveWhatClangGives
        LauncherCorpus.AMultiTargetCmakeProjectGivesAPlainBuildsDeviceCode
      )
      echo "skipped under the sanitizers (deploy/dev.sh says why): ${skip[*]}"
      phase test build-asan bash -c 'cd build-asan && ctest --output-on-failure -j"$(nproc)" -L "unit|integration|fuzz" "$@"' \
        _ -E "$(IFS='|'; echo "${skip[*]}")" "$@" || status=$?
    fi
    exit "$status"
    ;;
  *)
    echo "usage: deploy/dev.sh serve [kcached flags...] | test [ctest flags...]" >&2
    exit 2
    ;;
esac
