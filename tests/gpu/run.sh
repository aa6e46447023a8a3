#!/usr/bin/env bash
# Prepares the images the GPU test loads (through a temporary kcached), then runs it.
# Usage: tests/gpu/run.sh BUILD_DIR [IMAGES_DIR]. Exits 77 (skipped) where there is neither a CUDA
# driver nor an AMD GPU (with its HIP runtime, libamdhip64.so).
# On a GPU machine without this project's build tools: prepare here, carry IMAGES_DIR and the
# statically linked kcache_gpu_test there, run `kcache_gpu_test IMAGES_DIR`. For an AMD GPU, name
# its target ID here (`kcache_gpu_test --hip-arch` prints it there):
# KCACHE_GPU_TEST_AMD_ARCHS=gfx90a:sramecc+:xnack- tests/gpu/run.sh BUILD_DIR IMAGES_DIR.
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
if kcache --json capabilities | grep '"cuda_present":true' >/dev/null; then
  for arch in sm_80 sm_90; do
    kcache compile "$kernels/saxpy.ll" --arch $arch --emit cubin "${for_driver[@]}" -o "$images/saxpy.$arch.cubin" >/dev/null
  done
fi
# AMD: hsacos for this machine's AMD GPU, by the target ID HipLoader reads (what a client fetches
# for), or for the comma-separated KCACHE_GPU_TEST_AMD_ARCHS. The kernels are written here: vadd,
# and checked_store, whose error path reports and signals through rtlib and then returns, since
# ROCm's runtime ends the whole process when a kernel traps.
amd_archs=${KCACHE_GPU_TEST_AMD_ARCHS:-$("$build/tests/kcache_gpu_test" --hip-arch 2>/dev/null || true)}
if [ -n "$amd_archs" ]; then
  amd_layout="e-m:e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9"
  cat >"$work/vadd.ll" <<EOF
; vadd: c[i] = a[i] + b[i], one work-item per element; the block size comes from the dispatch
; packet (workgroup_size_x, byte 4), where HIP's blockDim.x comes from.
target datalayout = "$amd_layout"
target triple = "amdgcn-amd-amdhsa"

declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()

define amdgpu_kernel void @vadd(ptr addrspace(1) %a, ptr addrspace(1) %b, ptr addrspace(1) %c, i32 %n) {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %bid = call i32 @llvm.amdgcn.workgroup.id.x()
  %packet = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
  %size.addr = getelementptr inbounds i8, ptr addrspace(4) %packet, i64 4
  %size16 = load i16, ptr addrspace(4) %size.addr, align 4
  %size = zext i16 %size16 to i32
  %base = mul i32 %bid, %size
  %i = add i32 %base, %tid
  %inside = icmp slt i32 %i, %n
  br i1 %inside, label %body, label %done

body:
  %idx = sext i32 %i to i64
  %ap = getelementptr inbounds float, ptr addrspace(1) %a, i64 %idx
  %bp = getelementptr inbounds float, ptr addrspace(1) %b, i64 %idx
  %cp = getelementptr inbounds float, ptr addrspace(1) %c, i64 %idx
  %av = load float, ptr addrspace(1) %ap, align 4
  %bv = load float, ptr addrspace(1) %bp, align 4
  %sum = fadd float %av, %bv
  store float %sum, ptr addrspace(1) %cp, align 4
  br label %done

done:
  ret void
}
EOF
  cat >"$work/throw.ll" <<EOF
; checked_store: a bounds check whose error path reports the exception through rtlib, signals
; it, and returns (no trap: ROCm would abort the process, and the host would read nothing).
target datalayout = "$amd_layout"
target triple = "amdgcn-amd-amdhsa"

@msg = private unnamed_addr addrspace(1) constant [12 x i8] c"BoundsError\00"

declare void @gpu_report_exception(ptr)
declare void @gpu_signal_exception()
declare i32 @llvm.amdgcn.workitem.id.x()

define amdgpu_kernel void @checked_store(ptr addrspace(1) %a, i32 %n) {
entry:
  %i = call i32 @llvm.amdgcn.workitem.id.x()
  %ok = icmp slt i32 %i, %n
  br i1 %ok, label %store, label %throw

store:
  %i64 = sext i32 %i to i64
  %p = getelementptr i32, ptr addrspace(1) %a, i64 %i64
  store i32 %i, ptr addrspace(1) %p, align 4
  ret void

throw:
  call void @gpu_report_exception(ptr addrspacecast (ptr addrspace(1) @msg to ptr))
  call void @gpu_signal_exception()
  ret void
}
EOF
  IFS=, read -ra amd_list <<<"$amd_archs"
  # Code objects the runtime loads: version 4 under ROCm 5 (Debian's HIP 5.2), as a client states it.
  version=$("$build/tests/kcache_gpu_test" --hip-code-object 2>/dev/null || echo 0)
  cov=()
  if [ "$version" != 0 ]; then cov=(--amd-code-object "$version"); fi
  for arch in "${amd_list[@]}"; do
    kcache compile "$work/vadd.ll" --arch "$arch" --emit hsaco "${cov[@]}" -o "$images/vadd.$arch.hsaco" >/dev/null
    kcache compile "$work/throw.ll" --arch "$arch" --emit hsaco "${cov[@]}" -o "$images/throw.$arch.hsaco" >/dev/null
  done
fi
# Not `exec`: that would replace this shell, and its EXIT trap would never stop the daemon.
status=0
"$build/tests/kcache_gpu_test" "$images" || status=$?
exit $status
