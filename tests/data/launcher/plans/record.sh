#!/usr/bin/env bash
# Regenerates every recorded compiler plan in this folder by running the real compilers' dry runs:
#   NAME.nvcc  <- nvcc --dryrun ARGS      (plan lines on stderr, "#$ ...")
#   NAME.clang <- clang++-22 -### ARGS    (commands on stderr, lines starting with ' "')
# Record format: line 1 "# args: " + ARGS as a JSON array, line 2 "# exit: N", then the dry run's
# stderr verbatim. Sources live in the fixed scratch folder /tmp/kcache-plans/src, and every dry run
# gets an empty TMPDIR=/tmp/kcache-plans/work, so the recorded paths are stable across machines.
# Usage: tests/data/launcher/plans/record.sh   (needs /usr/local/cuda and /usr/bin/clang++-22)
set -euo pipefail

OUT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT=/tmp/kcache-plans
SRC=$ROOT/src
WORK=$ROOT/work
NVCC=/usr/local/cuda/bin/nvcc
CLANG=/usr/bin/clang++-22
RUN_PATH=/usr/local/cuda/bin:/usr/bin:/bin
HOSTCXX=/usr/bin/g++-12
[ -x "$HOSTCXX" ] || HOSTCXX=/usr/bin/g++

[ -x "$NVCC" ] || { echo "record.sh: no $NVCC" >&2; exit 1; }
[ -x "$CLANG" ] || { echo "record.sh: no $CLANG" >&2; exit 1; }

# --- the scratch sources ---------------------------------------------------------------------------
rm -rf "$SRC"
mkdir -p "$SRC/inc" "$SRC/obj" "$SRC/my dir"
cd "$SRC"
cat > inc/k.h <<'H'
#pragma once
#define KSCALE 2.0f
H
kernel() {  # kernel NAME
  cat <<K
#include "k.h"
__global__ void $1(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= KSCALE;
}
K
}
kernel k_scale | sed 's|"k.h"|"inc/k.h"|' > k.cu
kernel a_scale | sed 's|"k.h"|"inc/k.h"|' > a.cu
kernel b_scale | sed 's|"k.h"|"inc/k.h"|' > b.cu
kernel c_scale | sed 's|"k.h"|"inc/k.h"|' > c.cu
kernel ks_scale | sed 's|"k.h"|"../inc/k.h"|' > "my dir/k s.cu"
cp k.cu k.cpp
cat > host.cpp <<'C'
int host_add(int a, int b) { return a + b; }
C
cat > main.cpp <<'C'
int main() { return 0; }
C

# --- recording -------------------------------------------------------------------------------------
rm -f "$OUT"/*.nvcc "$OUT"/*.clang
COUNT=0

record() {  # record NAME.EXT ARGS...  (EXT picks the compiler)
  local name=$1; shift
  local dry
  case "$name" in
    *.nvcc) dry=("$NVCC" --dryrun) ;;
    *.clang) dry=("$CLANG" -###) ;;
    *) echo "record.sh: $name: unknown kind" >&2; exit 1 ;;
  esac
  rm -rf "$WORK"; mkdir -p "$WORK"
  local err=$ROOT/stderr code=0
  env -i PATH="$RUN_PATH" TMPDIR="$WORK" "${dry[@]}" "$@" >/dev/null 2>"$err" || code=$?
  {
    printf '# args: %s\n' "$(python3 -c 'import json,sys; print(json.dumps(sys.argv[1:]))' "$@")"
    printf '# exit: %d\n' "$code"
    cat "$err"
  } > "$OUT/$name"
  COUNT=$((COUNT + 1))
  printf '%-40s exit %d\n' "$name" "$code"
}

PT_FLAGS=(-D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__
          -D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr)

# nvcc: single compiles
record plain-sm80.nvcc -arch=sm_80 -c k.cu -o k.o
record no-arch.nvcc -c k.cu -o k.o
record ccbin.nvcc -ccbin "$HOSTCXX" -arch=sm_80 -c k.cu -o k.o
record generate-code-compute-sm.nvcc "--generate-code=arch=compute_80,code=[compute_80,sm_80]" -c k.cu -o k.o
record gencode-two.nvcc -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -c k.cu -o k.o
record gencode-three.nvcc -gencode arch=compute_75,code=sm_75 -gencode arch=compute_80,code=sm_80 \
  -gencode arch=compute_90,code=compute_90 -c k.cu -o k.o
record gencode-equals-ptx-and-sass.nvcc -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=[sm_90,compute_90] \
  -c k.cu -o k.o
record x-cu-cpp.nvcc -x cu -arch=sm_80 -c k.cpp -o k.o
record rdc-dc.nvcc -rdc=true -dc -arch=sm_80 k.cu -o k.o
record dc.nvcc -dc -arch=sm_80 k.cu -o k.o
record rdc-c.nvcc -rdc=true -arch=sm_80 -c k.cu -o k.o
record xcompiler-equals-list.nvcc -Xcompiler=-fPIC,-O2 -arch=sm_80 -c k.cu -o k.o
record compiler-options-two-words.nvcc --compiler-options "-fPIC -Wall" -arch=sm_80 -c k.cu -o k.o
record xptxas-v.nvcc -Xptxas -v -arch=sm_80 -c k.cu -o k.o
record threads-0.nvcc --threads 0 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -c k.cu -o k.o
record forward-unknown.nvcc -forward-unknown-to-host-compiler -Wall -arch=sm_80 -c k.cu -o k.o
record maxrregcount.nvcc -maxrregcount=32 -arch=sm_80 -c k.cu -o k.o
record use-fast-math.nvcc --use_fast_math -arch=sm_80 -c k.cu -o k.o
record lineinfo.nvcc -lineinfo -arch=sm_80 -c k.cu -o k.o
record device-debug-G.nvcc -G -arch=sm_80 -c k.cu -o k.o
record host-debug-g.nvcc -g -arch=sm_80 -c k.cu -o k.o
record depfile-MD.nvcc -MD -MT k.o -MF k.d -arch=sm_80 -c k.cu -o k.o
record deps-only-M.nvcc -M -arch=sm_80 k.cu
record preprocess-E.nvcc -E -arch=sm_80 k.cu
record isystem.nvcc -isystem inc -arch=sm_80 -c k.cu -o k.o
record expt-flags.nvcc --expt-relaxed-constexpr --extended-lambda -std=c++17 -arch=sm_80 -c k.cu -o k.o
record define-quoted.nvcc "-DNAME=\"a b\"" '-DQ=\"x\"' '-DR="x"' -D "S=1 2" -DPLAIN=1 -arch=sm_80 -c k.cu -o k.o
record path-with-space.nvcc -arch=sm_80 -c "my dir/k s.cu" -o "my dir/k s.o"
record output-before-c.nvcc -arch=sm_80 -o k.o -c k.cu
record two-sources.nvcc -arch=sm_80 -c a.cu b.cu
record three-sources.nvcc -arch=sm_80 -c a.cu b.cu c.cu
record two-sources-one-output.nvcc -arch=sm_80 -c a.cu b.cu -o ab.o
record two-sources-dc.nvcc -arch=sm_80 -dc a.cu b.cu
record ptx.nvcc --ptx -arch=sm_80 k.cu -o k.ptx
record cubin.nvcc -cubin -arch=sm_80 k.cu -o k.cubin
record fatbin.nvcc -fatbin -arch=sm_80 k.cu -o k.fatbin
record arch-native.nvcc -arch=native -c k.cu -o k.o
record arch-all-major.nvcc -arch=all-major -c k.cu -o k.o
record code-sm-only.nvcc -arch=compute_80 -code=sm_80,compute_80 -c k.cu -o k.o
record host-cpp-only.nvcc -c host.cpp -o host.o

# nvcc: build systems' shapes
record pytorch-cpp-extension.nvcc -I inc "${PT_FLAGS[@]}" --compiler-options '-fPIC' -O2 \
  -gencode=arch=compute_80,code=sm_80 -std=c++17 -c k.cu -o k.o
record pytorch-setup-release.nvcc -O3 -DNDEBUG --use_fast_math -Xcompiler -fPIC -std=c++17 \
  "${PT_FLAGS[@]}" -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -c k.cu -o k.o
record cmake-cuda-3.18.nvcc -forward-unknown-to-host-compiler -DX -I/tmp/kcache-plans/src/inc -O3 -DNDEBUG \
  "--generate-code=arch=compute_80,code=[compute_80,sm_80]" -Xcompiler=-fPIC -MD -MT obj/k.cu.o -MF obj/k.cu.o.d \
  -x cu -c k.cu -o obj/k.cu.o
record cmake-cuda-separable.nvcc -forward-unknown-to-host-compiler -I/tmp/kcache-plans/src/inc -O3 -DNDEBUG -std=c++17 \
  "--generate-code=arch=compute_80,code=[compute_80,sm_80]" "--generate-code=arch=compute_90,code=[compute_90,sm_90]" \
  -Xcompiler=-fPIC -MD -MT obj/k.cu.o -MF obj/k.cu.o.d -x cu -rdc=true -c k.cu -o obj/k.cu.o
record cutlass.nvcc -DCUTLASS_ENABLE_TENSOR_CORE_MMA=1 -I inc --expt-relaxed-constexpr -Xcompiler=-Wconversion \
  -Xcompiler=-fno-strict-aliasing -O3 -DNDEBUG -std=c++17 -gencode arch=compute_90a,code=sm_90a -c k.cu -o k.o
record meson.nvcc -Iinc -Xcompiler=-Wall,-Winvalid-pch -O2 -g -arch=sm_80 -MD -MT obj/k.cu.o -MF obj/k.cu.o.d \
  -o obj/k.cu.o -c k.cu
record unknown-option-MQ.nvcc -Iinc -O2 -arch=sm_80 -MD -MQ obj/k.cu.o -MF obj/k.cu.o.d -o obj/k.cu.o -c k.cu
record make-typical.nvcc -O2 -arch=sm_80 -Iinc -Xcompiler -Wall -c k.cu -o k.o
record bazel-rules-cuda.nvcc -x cu -Xcompiler -fPIC -Iinc -isystem /usr/local/cuda/include -DNDEBUG -O2 \
  "--generate-code=arch=compute_80,code=sm_80" "--generate-code=arch=compute_80,code=compute_80" \
  -ccbin "$HOSTCXX" -c k.cu -o obj/k.o

# nvcc: shapes the launcher should not cache (device link, link)
record dlink.nvcc -dlink -arch=sm_80 a.o b.o -o dlink.o
record cmake-device-link.nvcc -forward-unknown-to-host-compiler "--generate-code=arch=compute_80,code=[compute_80,sm_80]" \
  "--generate-code=arch=compute_90,code=[compute_90,sm_90]" -Xcompiler=-fPIC -Wno-deprecated-gpu-targets -shared -dlink \
  obj/app.cu.o -o obj/cmake_device_link.o libcore.a -lcudadevrt -lcudart_static -lrt -lpthread -ldl \
  -L/usr/local/cuda/targets/x86_64-linux/lib/stubs -L/usr/local/cuda/targets/x86_64-linux/lib
record link.nvcc -arch=sm_80 a.o b.o -o app
record compile-and-link.nvcc -arch=sm_80 k.cu main.cpp -o app

# clang
CP=--cuda-path=/usr/local/cuda
record clang-plain.clang -x cuda $CP --cuda-gpu-arch=sm_80 -c k.cu -o k.o
record clang-two-archs.clang -x cuda $CP --cuda-gpu-arch=sm_80 --cuda-gpu-arch=sm_90 -c k.cu -o k.o
record clang-no-x.clang $CP --cuda-gpu-arch=sm_80 -c k.cu -o k.o
record clang-fgpu-rdc.clang -x cuda $CP -fgpu-rdc --cuda-gpu-arch=sm_80 -c k.cu -o k.o
record clang-o2-cxx17.clang -x cuda $CP --cuda-gpu-arch=sm_80 -O2 -std=c++17 -c k.cu -o k.o
record clang-md-mf.clang -x cuda $CP --cuda-gpu-arch=sm_80 -MD -MF k.d -c k.cu -o k.o
record clang-include-isystem.clang -x cuda $CP --cuda-gpu-arch=sm_80 -I inc -isystem inc -c k.cu -o k.o
record clang-define-spaces.clang -x cuda $CP --cuda-gpu-arch=sm_80 "-DNAME=\"a b\"" '-DQ="x"' -D "SP=1 2" -c k.cu -o k.o
record clang-two-sources.clang -x cuda $CP --cuda-gpu-arch=sm_80 -c a.cu b.cu
record clang-g.clang -x cuda $CP --cuda-gpu-arch=sm_80 -g -c k.cu -o k.o
record clang-E.clang -x cuda $CP --cuda-gpu-arch=sm_80 -E k.cu
record clang-device-only.clang -x cuda $CP --cuda-gpu-arch=sm_80 --cuda-device-only -c k.cu -o k.ptx.o
record clang-host-only.clang -x cuda $CP --cuda-gpu-arch=sm_80 --cuda-host-only -c k.cu -o k.o
record clang-xclang.clang -x cuda $CP --cuda-gpu-arch=sm_80 -Xclang -fno-pch-timestamp -c k.cu -o k.o
record clang-offload-arch.clang -x cuda $CP --offload-arch=sm_80,sm_90 -c k.cu -o k.o
record clang-fpic.clang -x cuda $CP --cuda-gpu-arch=sm_80 -fPIC -c k.cu -o k.o
record clang-path-with-space.clang -x cuda $CP --cuda-gpu-arch=sm_80 -c "my dir/k s.cu" -o "my dir/k s.o"
record clang-cxx-not-cuda.clang -O2 -c k.cpp -o k.o
record clang-cmake-shape.clang -x cuda $CP --cuda-gpu-arch=sm_80 -DX -I/tmp/kcache-plans/src/inc -O3 -DNDEBUG -std=c++17 \
  -fPIC -MD -MT obj/k.cu.o -MF obj/k.cu.o.d -c k.cu -o obj/k.cu.o
record clang-cuda-default-arch.clang -x cuda $CP -c k.cu -o k.o
record clang-no-cuda-path.clang -x cuda --cuda-gpu-arch=sm_80 -c k.cu -o k.o

echo "record.sh: $COUNT records in $OUT"
