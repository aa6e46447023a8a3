; Two kernels as a frontend that emits AMDGPU IR directly writes them (no rtlib, no device
; libraries), for the test that holds kcache's code objects to the bare toolchain's (opt -O2,
; llc, ld.lld run as processes): a SAXPY, and a block sum through workgroup (LDS) memory with
; barriers. Code object version 5 is stated, so both sides build the same kind of object.
target datalayout = "e-m:e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9"
target triple = "amdgcn-amd-amdhsa"

@partial = internal addrspace(3) global [256 x float] poison, align 4

define amdgpu_kernel void @saxpy(float %a, ptr addrspace(1) noalias %x, ptr addrspace(1) noalias %y, i32 %n) #0 {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %bid = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %bid, 256
  %i = add i32 %base, %tid
  %in = icmp slt i32 %i, %n
  br i1 %in, label %body, label %exit

body:
  %idx = sext i32 %i to i64
  %px = getelementptr inbounds float, ptr addrspace(1) %x, i64 %idx
  %py = getelementptr inbounds float, ptr addrspace(1) %y, i64 %idx
  %vx = load float, ptr addrspace(1) %px, align 4
  %vy = load float, ptr addrspace(1) %py, align 4
  %r = call float @llvm.fma.f32(float %a, float %vx, float %vy)
  store float %r, ptr addrspace(1) %py, align 4
  br label %exit

exit:
  ret void
}

define amdgpu_kernel void @block_sum(ptr addrspace(1) noalias %in, ptr addrspace(1) noalias %out) #0 {
entry:
  %tid = call i32 @llvm.amdgcn.workitem.id.x()
  %bid = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %bid, 256
  %i = add i32 %base, %tid
  %idx = zext i32 %i to i64
  %p = getelementptr inbounds float, ptr addrspace(1) %in, i64 %idx
  %v = load float, ptr addrspace(1) %p, align 4
  %t64 = zext i32 %tid to i64
  %slot = getelementptr inbounds [256 x float], ptr addrspace(3) @partial, i64 0, i64 %t64
  store float %v, ptr addrspace(3) %slot, align 4
  br label %loop

loop:
  %stride = phi i32 [ 128, %entry ], [ %next, %latch ]
  call void @llvm.amdgcn.s.barrier()
  %active = icmp ult i32 %tid, %stride
  br i1 %active, label %add, label %latch

add:
  %other = add i32 %tid, %stride
  %o64 = zext i32 %other to i64
  %oslot = getelementptr inbounds [256 x float], ptr addrspace(3) @partial, i64 0, i64 %o64
  %a = load float, ptr addrspace(3) %slot, align 4
  %b = load float, ptr addrspace(3) %oslot, align 4
  %s = fadd float %a, %b
  store float %s, ptr addrspace(3) %slot, align 4
  br label %latch

latch:
  %next = lshr i32 %stride, 1
  %more = icmp ne i32 %next, 0
  br i1 %more, label %loop, label %done

done:
  %first = icmp eq i32 %tid, 0
  br i1 %first, label %write, label %exit

write:
  %sum = load float, ptr addrspace(3) @partial, align 4
  %b64 = zext i32 %bid to i64
  %q = getelementptr inbounds float, ptr addrspace(1) %out, i64 %b64
  store float %sum, ptr addrspace(1) %q, align 4
  br label %exit

exit:
  ret void
}

declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare void @llvm.amdgcn.s.barrier()
declare float @llvm.fma.f32(float, float, float)

attributes #0 = { "amdgpu-flat-work-group-size"="1,256" }

!llvm.module.flags = !{!0}
!0 = !{i32 1, !"amdhsa_code_object_version", i32 500}
