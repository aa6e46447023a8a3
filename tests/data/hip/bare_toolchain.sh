#!/usr/bin/env bash
# The reference "bare toolchain" for one HIP file and one AMDGPU arch: the LLVM tools run as plain
# processes, doing what clang's HIP toolchain does, so kcache's code objects can be held to it.
#
#   bare_toolchain.sh FILE.hip ARCH [OUTDIR]
#
#   clang++-22 (device only, bitcode) -> llvm-link-22 --only-needed --internalize <device libs>
#   -> opt-22 -O2 -> llc-22 -mtriple=amdgcn-amd-amdhsa -mcpu=ARCH -filetype=obj
#   -> ld.lld-22 -shared --no-undefined -> OUTDIR/<stem>.<ARCH>.hsaco
#
# Prints one line per kernel ("kernel: <symbol>"), read from the code object's AMDGPU metadata
# note (llvm-readobj-22 --notes). Exits non-zero with the failing step's message on failure.
#
# Environment: LLVM_SUFFIX (default -22), HIP_DEVICE_LIB_DIR (default Debian's
# /usr/lib/x86_64-linux-gnu/amdgcn/bitcode, package rocm-device-libs 5.2.3).
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: $0 FILE.hip ARCH [OUTDIR]" >&2
  exit 2
fi
src=$1
arch=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${3:-${TMPDIR:-/tmp}/kcache-hip-bare}
mkdir -p "$out"

sfx=${LLVM_SUFFIX:--22}
libdir=${HIP_DEVICE_LIB_DIR:-/usr/lib/x86_64-linux-gnu/amdgcn/bitcode}
stem=$(basename "$src")
stem=${stem%.*}
base="$out/$stem.$arch"

# HIP's wave size: 32 on gfx10/gfx11/gfx12 (clang's HIP default; HIP 5.2 forbids wave64 on
# gfx10), 64 on gfx9 and older.
case "$arch" in
  gfx10* | gfx11* | gfx12*) wave=32 wave64=off ;;
  *) wave=64 wave64=on ;;
esac

step() {  # step NAME CMD...: run, and on failure say which step and show its diagnostics
  local name=$1
  shift
  if ! "$@" 2>"$base.$name.err"; then
    echo "FAILED at $name: $*" >&2
    grep -E 'error|undefined|LLVM ERROR|Cannot select' "$base.$name.err" | head -5 >&2 ||
      head -5 "$base.$name.err" >&2
    exit 1
  fi
}

# 1. clang: device-only bitcode for this arch, against Debian's HIP 5.2.3 headers (found by
#    clang itself under /usr/include: no -isystem or --hip-path is needed). -nogpulib: the
#    device libraries are linked below. -mcode-object-version=5: clang-22 defaults to 6, for
#    which rocm-device-libs 5.2.3 has no oclc_abi_version file.
step clang "clang++$sfx" -x hip --offload-arch="$arch" --offload-device-only --no-gpu-bundle-output \
  -nogpulib -O2 -emit-llvm -c -mcode-object-version=5 -D__AMDGCN_WAVEFRONT_SIZE=$wave \
  -include "$here/hip_prelude.h" "$src" -o "$base.bc"

# 2. llvm-link: the device libraries clang's HIP toolchain links (-mlink-builtin-bitcode, which
#    keeps only what is used and internalizes it), plus two it no longer links but HIP 5.2 needs:
#    hip.bc (__atomic_work_item_fence, called by __syncthreads/__threadfence*) and
#    oclc_daz_opt_off.bc (ocml 5.2.3 reads __oclc_daz_opt). The control constants are HIP's
#    defaults: no unsafe math, no finite-only, correctly rounded sqrt, no DAZ.
isa=${arch#gfx}
libs=(
  "$libdir/hip.bc" "$libdir/ocml.bc" "$libdir/ockl.bc"
  "$libdir/oclc_daz_opt_off.bc" "$libdir/oclc_unsafe_math_off.bc"
  "$libdir/oclc_finite_only_off.bc" "$libdir/oclc_correctly_rounded_sqrt_on.bc"
  "$libdir/oclc_wavefrontsize64_$wave64.bc" "$libdir/oclc_abi_version_500.bc"
)
if [[ -f "$libdir/oclc_isa_version_$isa.bc" ]]; then
  libs+=("$libdir/oclc_isa_version_$isa.bc")
else
  # rocm-device-libs 5.2.3 has none for gfx942 (only 940) or any gfx11; clang's driver refuses
  # such an arch outright. Going on without it only fails (at ld.lld) if the code reads
  # __oclc_ISA_version.
  echo "note: no oclc_isa_version_$isa.bc in $libdir; linking without it" >&2
fi
step link "llvm-link$sfx" "$base.bc" --only-needed --internalize "${libs[@]}" -o "$base.linked.bc"

# 3. opt -O2 over the linked module (the function attributes carry target-cpu/target-features).
step opt "opt$sfx" -O2 "$base.linked.bc" -o "$base.opt.bc"

# 4. llc: the object for this arch.
step llc "llc$sfx" -mtriple=amdgcn-amd-amdhsa -mcpu="$arch" -O2 -filetype=obj "$base.opt.bc" -o "$base.o"

# 5. ld.lld: the code object. --no-undefined as clang's amdgcn-link does, so a missing device
#    library symbol is an error here rather than at load time.
step lld "ld.lld$sfx" -shared --no-undefined "$base.o" -o "$base.hsaco"

"llvm-readobj$sfx" --notes "$base.hsaco" | sed -n 's/^ *\.symbol: *\(.*\)\.kd$/kernel: \1/p' | sort
