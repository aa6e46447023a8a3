#!/usr/bin/env bash
# deploy.package: the Debian package, built and installed as a user would (deploy/README.md, "The Debian package").
#
#   1. `cpack -G DEB` in the build folder makes kcache_VERSION_amd64.deb;
#   2. it holds every file it should, and its Depends names the Debian package of every library
#      its binaries link (dpkg-shlibdeps made the list; this checks it against readelf);
#   3. it is installed into a fresh Debian 12 root: mmdebstrap makes one from the Debian mirror
#      with the Depends and python3 (kept as a tarball for a week: see below), then `dpkg -i`
#      installs the package into a new copy of it, with its conffile, and its postinst runs ldconfig;
#   4. the quick start runs in that root, chrooted, in its own PID and mount namespaces: kcached
#      from /usr/bin with the installed /etc/kcache/kcached.toml (its addresses and database moved
#      to free ones), a compile with the installed kcache (a miss, then a hit), the Python module
#      from dist-packages finding libkcache.so through ldconfig, and a C program built against
#      the package's header and pkg-config file.
#
# Where mmdebstrap or the mirror is missing (or KCACHE_PACKAGE_ROOT=dpkg), step 3 unpacks the
# package into an empty folder instead (dpkg-deb -x) and step 4 runs its files there with this
# machine's libraries; the test says so. Exit 77 (skipped) without cpack or dpkg-deb.
# Usage: check_package.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
# No `grep -q` after a pipe: under pipefail, a writer that is still writing when grep -q has found
# its line and left dies of SIGPIPE, and the check fails at random (ldconfig -p's did, once this
# test ran beside others). grep reading it all, to /dev/null, answers the same.
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
for tool in cpack dpkg-deb readelf; do
  command -v "$tool" >/dev/null || { echo "skipped: $tool is absent"; exit 77; }
done
work=$(mktemp -d "${TMPDIR:-/tmp}/kcache-package-test.XXXXXX")
ok=0
finish() {
  if [ "$ok" = 1 ] && [ "${KCACHE_KEEP_TEST_DIRS:-0}" != 1 ]; then rm -rf "$work"; else echo "kept $work"; fi
}
trap finish EXIT
started=$(date +%s.%N)
phase() { echo "== $1 ($(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}') s in)"; }
fail() { echo "FAIL: $*" >&2; exit 1; }

phase "cpack -G DEB"
(cd "$build" && cpack --config CPackConfig.cmake -G DEB -B "$work/cpack" >"$work/cpack.log" 2>&1) ||
  { tail -20 "$work/cpack.log"; fail "cpack failed"; }
version=$(sed -n 's/^set(CPACK_PACKAGE_VERSION "\(.*\)")$/\1/p' "$build/CPackConfig.cmake")
deb="$work/cpack/kcache_${version}_amd64.deb"
[ -f "$deb" ] || fail "no $deb: $(ls "$work/cpack")"
echo "$(basename "$deb"): $(stat -c %s "$deb") bytes"

phase "contents"
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./|/|' >"$work/files"
for f in /usr/bin/kcached /usr/bin/kcache /usr/bin/kcache-grpc /usr/lib/libkcache.so /usr/include/kcache/kcache.h \
         /usr/lib/pkgconfig/kcache.pc /usr/lib/python3/dist-packages/kcache.py /usr/share/kcache/python/kcache.py \
         /usr/lib/systemd/system/kcached.service \
         /etc/kcache/kcached.toml /usr/share/doc/kcache/kcached.example.toml; do
  grep -qx "$f" "$work/files" || fail "the package has no $f"
done
dpkg-deb -I "$deb" conffiles | grep -x /etc/kcache/kcached.toml >/dev/null || fail "/etc/kcache/kcached.toml is no conffile"
dpkg-deb -x "$deb" "$work/unpacked"
grep -qx 'ExecStart=/usr/bin/kcached --config /etc/kcache/kcached.toml' "$work/unpacked/usr/lib/systemd/system/kcached.service" ||
  fail "the unit does not start /usr/bin/kcached"
grep -q '^ExecStart=/usr/bin/kcached ' "$work/unpacked/usr/share/doc/kcache/fleet.conf" ||
  fail "the fleet drop-in does not start /usr/bin/kcached"
if grep -q '^ExecStart=/usr/local' "$work/unpacked/usr/share/doc/kcache/fleet.conf" \
     "$work/unpacked/usr/lib/systemd/system/kcached.service"; then
  fail "a packaged unit file starts a kcached under /usr/local"
fi

phase "Depends against the libraries linked"
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
declared=" $(echo "$depends" | tr ',' '\n' | sed 's/(.*//; s/|.*//; s/ //g' | tr '\n' ' ') "
# Each library any of them links, once, with the Debian package holding it (one dpkg -S for all).
libs=$(for elf in usr/bin/kcached usr/bin/kcache usr/bin/kcache-grpc usr/lib/libkcache.so; do
         readelf -d "$work/unpacked/$elf" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
       done | sort -u)
ldconfig -p >"$work/ldconfig"
for lib in $libs; do
  path=$(awk -v l="$lib" '$1 == l && /x86-64/ && !found {print $NF; found = 1}' "$work/ldconfig")
  [ -n "$path" ] || fail "the package links $lib, which this machine lacks"
  real=$(readlink -f "$path")
  echo "$real" "${real/#\/usr\/lib\//\/lib\/}"  # dpkg knows a file by the path its package gave: /lib or /usr/lib
done >"$work/lib-paths"
dpkg -S $(cat "$work/lib-paths") >"$work/lib-owners" 2>/dev/null || true
while read -r real _; do
  grep -q "/${real##*/}\$" "$work/lib-owners" || fail "the package links $real, which no Debian package holds"
done <"$work/lib-paths"
for owner in $(sed 's/:.*//' "$work/lib-owners" | sort -u); do
  # The package, or a name it provides (a shlibs file may name that: libspdlog1.10-fmt9).
  named=0
  for name in "$owner" $(dpkg-query -W -f='${Provides}' "$owner" | tr ',' '\n' | sed 's/(.*//; s/ //g'); do
    case "$declared" in *" $name "*) named=1;; esac
  done
  [ "$named" = 1 ] || fail "the package links $(grep "^$owner:" "$work/lib-owners" | sed 's/.*: //' | xargs) from $owner, which Depends does not name"
done
echo "$(echo "$libs" | wc -w) libraries linked, from $(sed 's/:.*//' "$work/lib-owners" | sort -u | wc -l) Debian packages, each in Depends"

root="$work/root"
mode=chroot
if [ "${KCACHE_PACKAGE_ROOT:-chroot}" = dpkg ]; then
  mode=dpkg
elif ! command -v mmdebstrap >/dev/null || [ "$(id -u)" != 0 ]; then
  echo "no mmdebstrap, or not root (a chroot needs root): unpacking with dpkg-deb -x instead"
  mode=dpkg
fi
if [ "$mode" = chroot ]; then
  # A pristine Debian 12 root made by mmdebstrap from the mirror with the Depends and python3, kept
  # as a tarball in a cache folder for a week (making it takes 1-2 minutes on two cores, nearly all
  # of it dpkg unpacking 150 packages; unpacking the tarball takes seconds). The package is
  # installed afresh into a new copy every run.
  cache="${KCACHE_PACKAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kcache/package-test}"
  mkdir -p "$cache"
  packages="$(echo "$declared" | xargs | tr ' ' ','),python3"
  tarball="$cache/root-$(echo "$packages" | sha256sum | cut -c1-16).tar"
  if [ -z "$(find "$tarball" -mtime -7 2>/dev/null)" ]; then
    phase "a fresh Debian 12 root (mmdebstrap) with the Depends and python3"
    find "$cache" -name 'root-*.tar*' -delete
    if ! mmdebstrap --variant=apt --mode=root --include="$packages" bookworm "$tarball.new.tar" \
          "deb http://deb.debian.org/debian bookworm main" \
          "deb http://deb.debian.org/debian-security bookworm-security main" >"$work/mmdebstrap.log" 2>&1; then
      tail -5 "$work/mmdebstrap.log"
      echo "mmdebstrap could not make a root (no mirror?): unpacking with dpkg-deb -x instead"
      rm -f "$tarball.new.tar"
      mode=dpkg
    else
      mv "$tarball.new.tar" "$tarball"
    fi
  else
    phase "the Debian 12 root mmdebstrap made on $(date -r "$tarball" +%F) ($tarball)"
  fi
  if [ "$mode" = chroot ]; then
    mkdir -p "$root"
    tar -xf "$tarball" -C "$root"
  fi
fi

if [ "$mode" = chroot ]; then
  phase "dpkg -i in the fresh root"
  cp "$deb" "$root/tmp/"
  chroot "$root" dpkg -i "/tmp/$(basename "$deb")" >"$work/dpkg.log" 2>&1 || { cat "$work/dpkg.log"; fail "dpkg -i failed"; }
  run_root() { unshare --mount --pid --fork --mount-proc="$root/proc" chroot "$root" /bin/sh -c "$1"; }
  # Everything it links resolves inside the root (its own Debian libraries, not this machine's).
  for elf in /usr/bin/kcached /usr/bin/kcache /usr/bin/kcache-grpc /usr/lib/libkcache.so; do
    readelf -d "$root$elf" | grep NEEDED >/dev/null || continue  # static (kcache)
    run_root "ldd $elf" >"$work/ldd" 2>&1 || { cat "$work/ldd"; fail "ldd $elf failed in the root"; }
    if grep -q "not found" "$work/ldd"; then cat "$work/ldd"; fail "$elf lacks a library in the root"; fi
  done
  chroot "$root" ldconfig -p | grep 'libkcache.so.0 ' >/dev/null || fail "ldconfig's cache has no libkcache.so.0 (the ldconfig trigger did not run)"
  prefix=""
else
  # Unpacked only: dpkg --root would run the maintainer scripts (ldconfig) on this machine.
  phase "dpkg-deb -x into an empty root (this machine's libraries)"
  dpkg-deb -x "$deb" "$root"
  mkdir -p "$root/tmp"
  run_root() { LD_LIBRARY_PATH="$root/usr/lib" PYTHONPATH="$root/usr/lib/python3/dist-packages" /bin/sh -c "$1"; }
  prefix=$root
fi

phase "the quick start with the installed binaries"
cp "$src/tests/data/kernels/saxpy.ll" "$root/tmp/saxpy.ll"
cat >"$root/tmp/hit.c" <<'EOF'
/* The C API through the package's header and pkg-config file: compile saxpy, expect a hit. */
#include <kcache/kcache.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
  FILE *f = fopen(argv[2], "rb");
  static char module[1 << 20];
  size_t size = f ? fread(module, 1, sizeof module, f) : 0;
  kcache_client *client;
  if (kcache_connect(argv[1], 60, &client) != KCACHE_OK) return fprintf(stderr, "%s\n", kcache_last_error()), 2;
  kcache_job job;
  kcache_job_init_size(&job, sizeof job);
  const char *archs[] = {"sm_80"};
  job.archs = archs;
  job.arch_count = 1;
  job.driver_version = KCACHE_DRIVER_NONE;
  kcache_result *result;
  if (kcache_compile(client, module, size, &job, &result) != KCACHE_OK) return fprintf(stderr, "%s\n", kcache_last_error()), 3;
  printf("%s %s\n", kcache_result_hit(result) ? "hit" : "miss", kcache_result_key(result));
  kcache_result_free(result);
  kcache_client_free(client);
  return 0;
}
EOF
pc="PKG_CONFIG_SYSROOT_DIR=$root PKG_CONFIG_LIBDIR=$root/usr/lib/pkgconfig"
if command -v cc >/dev/null && command -v pkg-config >/dev/null; then
  # shellcheck disable=SC2046,SC2086
  cc -o "$root/tmp/hit" "$root/tmp/hit.c" $(env $pc pkg-config --cflags --libs kcache) || fail "hit.c does not build from the package"
fi
cat >"$root/tmp/quickstart.sh" <<EOF
set -e
cd /tmp
P=$prefix
\$P/usr/bin/kcached --config \$P/etc/kcache/kcached.toml --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 \
  --port-file \$P/tmp/port --db \$P/tmp/db --workers 2 > \$P/tmp/kcached.log 2>&1 &
daemon=\$!
for i in \$(seq 300); do [ -s \$P/tmp/port ] && break; sleep 0.1; done
server=127.0.0.1:\$(cat \$P/tmp/port)
\$P/usr/bin/kcache --server \$server compile \$P/tmp/saxpy.ll --arch sm_80 --emit ptx
\$P/usr/bin/kcache --server \$server compile \$P/tmp/saxpy.ll --arch sm_80 --emit ptx
\$P/usr/bin/kcache-grpc --server \$server compile \$P/tmp/saxpy.ll --arch sm_80 --emit ptx
python3 -c "import kcache, sys; c = kcache.Client('\$server'); r = c.compile_ir(open('\$P/tmp/saxpy.ll', 'rb').read(), archs=['sm_80'], kinds=['ptx']); print('python', 'hit' if r.hit else 'miss', kcache.__file__)"
if [ -x \$P/tmp/hit ]; then \$P/tmp/hit \$server \$P/tmp/saxpy.ll; fi
\$P/usr/bin/kcache --server \$server stats | grep -E '^(hits|misses|hit rate) '
kill -TERM \$daemon
wait \$daemon
EOF
run_root "sh $prefix/tmp/quickstart.sh" >"$work/quickstart.log" 2>&1 ||
  { cat "$work/quickstart.log"; tail -20 "$root/tmp/kcached.log"; fail "the quick start failed"; }
cat "$work/quickstart.log"
grep -q '^miss ' "$work/quickstart.log" || fail "the first compile was no miss"
[ "$(grep -c '^hit ' "$work/quickstart.log")" -ge 2 ] || fail "the second compiles were no hits"
grep -q "^python hit $prefix/usr/lib/python3/dist-packages/kcache.py" "$work/quickstart.log" ||
  fail "the installed Python module did not get a hit"
if [ -x "$root/tmp/hit" ]; then
  grep -q '^hit [0-9a-f]\{64\}$' "$work/quickstart.log" || fail "the C program did not get a hit"
fi
hits=$(grep -cE '^(hit +[0-9a-f]{64}|python hit )' "$work/quickstart.log")
grep -q "^hits  *$hits\$" "$work/quickstart.log" || fail "kcache stats does not count the $hits hits"

phase "Debian's files: copyright, changelog, man pages, lintian"
for f in /usr/share/doc/kcache/copyright /usr/share/doc/kcache/changelog.gz /usr/share/man/man8/kcached.8.gz \
         /usr/share/man/man1/kcache.1.gz /usr/share/man/man1/kcache-grpc.1.gz /usr/share/lintian/overrides/kcache \
         /usr/lib/libkcache.so.0 /usr/share/doc/kcache/examples/saxpy.ll /usr/share/doc/kcache/docs/cli.md; do
  grep -qx "$f" "$work/files" || fail "the package has no $f"
done
zcat "$work/unpacked/usr/share/man/man8/kcached.8.gz" | grep 'Address to listen on' >/dev/null || fail "kcached's man page lacks its flags"
readelf -d "$work/unpacked/usr/lib/libkcache.so.0" | grep 'SONAME.*\[libkcache.so.0\]' >/dev/null || fail "libkcache has no versioned SONAME"
dpkg-deb -I "$deb" triggers | grep -x 'activate-noawait ldconfig' >/dev/null || fail "no ldconfig trigger"
if command -v lintian >/dev/null; then
  # Errors fail the package; each warning left is overridden in deploy/package/lintian-overrides,
  # which says why. (lintian as root says so on stderr: not a finding.)
  lintian --fail-on error,warning "$deb" >"$work/lintian.log" 2>&1 || { cat "$work/lintian.log"; fail "lintian: errors or warnings"; }
  cat "$work/lintian.log"
else
  echo "lintian is absent (deploy/install-deps.sh installs it): not run"
fi

# Installed, enabled as the README says, then purged, in a throwaway dpkg root: the maintainer
# scripts run without a chroot ($DPKG_ROOT, --force-script-chrootless), as they would on a machine
# without systemd running. Nothing is left but dpkg's own records.
phase "install, enable and purge in a throwaway root"
purge_root="$work/purge-root"
mkdir -p "$purge_root/var/lib/dpkg/info" "$purge_root/var/lib/dpkg/updates" "$purge_root/etc/systemd/system"
: >"$purge_root/var/lib/dpkg/status"
: >"$purge_root/var/lib/dpkg/available"
in_root() { dpkg --root="$purge_root" --force-script-chrootless --force-depends --log="$work/purge-dpkg.log" "$@"; }
in_root -i "$deb" >"$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "dpkg --root -i failed"; }
[ -f "$purge_root/usr/bin/kcached" ] && [ -f "$purge_root/etc/kcache/kcached.toml" ] || fail "the throwaway install lacks its files"
mkdir -p "$purge_root/etc/systemd/system/multi-user.target.wants"  # what `systemctl enable kcached` makes
ln -s /usr/lib/systemd/system/kcached.service "$purge_root/etc/systemd/system/multi-user.target.wants/kcached.service"
in_root --purge kcache >>"$work/purge.log" 2>&1 || { cat "$work/purge.log"; fail "dpkg --purge failed"; }
left=$(cd "$purge_root" && find . -mindepth 1 ! -type d ! -path './var/lib/dpkg/*' | sort)
[ -z "$left" ] || fail "the purge left: $left"
# What the root had before (a machine's /etc/systemd/system) and dpkg's own folders stay.
dirs=$(cd "$purge_root" && find . -mindepth 1 -type d ! -path './var' ! -path './var/lib' ! -path './var/lib/dpkg*' \
         ! -path ./etc ! -path ./etc/systemd ! -path ./etc/systemd/system | sort)
[ -z "$dirs" ] || fail "the purge left folders: $dirs"
echo "purged: nothing left but dpkg's records"
phase "done ($mode)"
ok=1
