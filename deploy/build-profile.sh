#!/usr/bin/env bash
# Where a build and test pass spent its time, read from what Ninja and ctest already record:
#   deploy/build-profile.sh [BUILD_DIR...]     (default: build, and build-asan where it exists)
# For each folder: the phases deploy/dev.sh timed (kcache-phases.tsv), the 15 slowest compile
# units and the slowest links of Ninja's last run (.ninja_log), and the 15 slowest tests of
# ctest's last run (Testing/Temporary/LastTest.log). Times are wall-clock seconds; with ninja -j2
# two steps overlap, so the steps add up to about twice the build's wall time.
set -euo pipefail
cd "$(dirname "$0")/.."

dirs=("$@")
if [ ${#dirs[@]} -eq 0 ]; then
  dirs=(build)
  [ -d build-asan ] && dirs+=(build-asan)
fi

# The entries of Ninja's last run that did work. .ninja_log appends a line as each step ends
# (start and end in ms from that run's start): an end time lower than the line before it
# starts a new run. A run that rebuilt nothing leaves no lines, so the last run with lines is
# the last build that did work.
last_run() {
  awk -F'\t' '
    /^#/ { next }
    { if (NR > 1 && $2 + 0 < prev) { n = 0 } prev = $2 + 0; line[++n] = $0 }
    END { for (i = 1; i <= n; ++i) print line[i] }' "$1/.ninja_log"
}

# kind<TAB>seconds<TAB>output for each step of the last run.
steps() {
  last_run "$1" | awk -F'\t' '{
    out = $4; secs = ($2 - $1) / 1000
    if (out ~ /\.o$/) kind = "compile"
    else if (out ~ /\.a$/) kind = "archive"
    else if (out ~ /\.(so|so\.[0-9.]+)$/ || out !~ /\.[A-Za-z0-9_]+$/ || out ~ /_test$|_tests$|fuzzer$/) kind = "link"
    else kind = "other"
    printf "%s\t%.1f\t%s\n", kind, secs, out
  }'
}

profile_build() {
  local dir=$1
  if [ ! -f "$dir/.ninja_log" ]; then
    echo "  (no .ninja_log: not built with Ninja yet)"
    return
  fi
  local all
  all=$(steps "$dir")
  echo "  Ninja's last run: $(echo "$all" | grep -c .) steps, $(last_run "$dir" | awk -F'\t' '
      BEGIN { lo = -1 } { if (lo < 0 || $1 < lo) lo = $1; if ($2 > hi) hi = $2 }
      END { printf "%.0f s from first start to last end", (hi - lo) / 1000 }')"
  echo "$all" | awk -F'\t' '{ t[$1] += $2; c[$1]++ }
    END { for (k in t) printf "    %-8s %4d steps %7.0f s of step time\n", k, c[k], t[k] }' | sort
  echo "  The 15 slowest compile units:"
  echo "$all" | awk -F'\t' '$1 == "compile"' | sort -t$'\t' -k2,2 -rn | head -15 |
    awk -F'\t' '{ printf "    %6.1f s  %s\n", $2, $3 }'
  echo "  The slowest links:"
  echo "$all" | awk -F'\t' '$1 == "link"' | sort -t$'\t' -k2,2 -rn | head -8 |
    awk -F'\t' '{ printf "    %6.1f s  %s\n", $2, $3 }'
  local other
  other=$(echo "$all" | awk -F'\t' '$1 == "other" { s += $2; n++ } END { if (n) printf "%d steps, %.0f s", n, s }')
  [ -n "$other" ] && echo "  Generated files (corpora, bitcode, protobuf): $other"
  return 0
}

profile_tests() {
  local log=$1/Testing/Temporary/LastTest.log
  if [ ! -f "$log" ]; then
    echo "  (no ctest run recorded)"
    return
  fi
  awk '
    /^[0-9]+\/[0-9]+ Test: / { sub(/^[0-9]+\/[0-9]+ Test: /, ""); name = $0 }
    /^Test time = / { printf "%s\t%s\n", $4, name }' "$log" > "$1/.test-times.tsv"
  awk -F'\t' '{ s += $1; n++ } END { printf "  ctest'"'"'s last run: %d tests, %.0f s of test time\n", n, s }' \
    "$1/.test-times.tsv"
  echo "  The 15 slowest tests:"
  sort -t$'\t' -k1,1 -rn "$1/.test-times.tsv" | head -15 | awk -F'\t' '{ printf "    %6.1f s  %s\n", $1, $2 }'
  rm -f "$1/.test-times.tsv"
}

for dir in "${dirs[@]}"; do
  echo "== $dir =="
  if [ -f "$dir/kcache-phases.tsv" ]; then
    echo "  Phases (deploy/dev.sh, wall-clock):"
    awk -F'\t' '{ printf "    %-28s %6d s\n", $1, $2; s += $2 } END { printf "    %-28s %6d s\n", "total", s }' \
      "$dir/kcache-phases.tsv"
  fi
  profile_build "$dir"
  profile_tests "$dir"
done
