; block_sum: a tree reduction of 256 floats per block through shared memory (addrspace 3),
; with barriers between the steps.
target triple = "nvptx64-nvidia-cuda"

@tile = internal addrspace(3) global [256 x float] undef, align 4

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
declare void @llvm.nvvm.barrier0()

define ptx_kernel void @block_sum(ptr addrspace(1) %in, ptr addrspace(1) %out) {
entry:
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %b = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %base = mul i32 %b, 256
  %gi = add i32 %base, %t
  %gi64 = zext i32 %gi to i64
  %src = getelementptr float, ptr addrspace(1) %in, i64 %gi64
  %v = load float, ptr addrspace(1) %src
  %t64 = zext i32 %t to i64
  %slot = getelementptr [256 x float], ptr addrspace(3) @tile, i64 0, i64 %t64
  store float %v, ptr addrspace(3) %slot
  call void @llvm.nvvm.barrier0()
  br label %loop

loop:
  %stride = phi i32 [ 128, %entry ], [ %next, %cont ]
  %active = icmp ult i32 %t, %stride
  br i1 %active, label %add, label %cont

add:
  %o = add i32 %t, %stride
  %o64 = zext i32 %o to i64
  %oslot = getelementptr [256 x float], ptr addrspace(3) @tile, i64 0, i64 %o64
  %x = load float, ptr addrspace(3) %slot
  %y = load float, ptr addrspace(3) %oslot
  %s = fadd float %x, %y
  store float %s, ptr addrspace(3) %slot
  br label %cont

cont:
  call void @llvm.nvvm.barrier0()
  %next = lshr i32 %stride, 1
  %more = icmp ne i32 %next, 0
  br i1 %more, label %loop, label %done

done:
  %first = icmp eq i32 %t, 0
  br i1 %first, label %write, label %exit

write:
  %r = load float, ptr addrspace(3) @tile
  %b64 = zext i32 %b to i64
  %dst = getelementptr float, ptr addrspace(1) %out, i64 %b64
  store float %r, ptr addrspace(1) %dst
  br label %exit

exit:
  ret void
}
