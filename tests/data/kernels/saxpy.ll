; saxpy: y[i] = a * x[i] + y[i], one thread per element. A kernel by calling convention.
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
declare i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()

define ptx_kernel void @saxpy(float %a, ptr addrspace(1) %x, ptr addrspace(1) %y, i32 %n) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ntid = call i32 @llvm.nvvm.read.ptx.sreg.ntid.x()
  %ctaid = call i32 @llvm.nvvm.read.ptx.sreg.ctaid.x()
  %base = mul i32 %ctaid, %ntid
  %i = add i32 %base, %tid
  %inside = icmp slt i32 %i, %n
  br i1 %inside, label %body, label %done

body:
  %idx = sext i32 %i to i64
  %xp = getelementptr float, ptr addrspace(1) %x, i64 %idx
  %yp = getelementptr float, ptr addrspace(1) %y, i64 %idx
  %xv = load float, ptr addrspace(1) %xp
  %yv = load float, ptr addrspace(1) %yp
  %ax = fmul float %a, %xv
  %r = fadd float %ax, %yv
  store float %r, ptr addrspace(1) %yp
  br label %done

done:
  ret void
}
