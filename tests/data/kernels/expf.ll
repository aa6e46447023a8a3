; exp_all: y = exp(x) through libdevice's __nv_expf, as clang -nocudalib or Julia leave it.
target triple = "nvptx64-nvidia-cuda"

declare float @__nv_expf(float)
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()

define ptx_kernel void @exp_all(ptr addrspace(1) %x, i32 %n) {
entry:
  %i = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %in = icmp slt i32 %i, %n
  br i1 %in, label %body, label %done

body:
  %i64 = sext i32 %i to i64
  %p = getelementptr float, ptr addrspace(1) %x, i64 %i64
  %v = load float, ptr addrspace(1) %p
  %e = call float @__nv_expf(float %v)
  store float %e, ptr addrspace(1) %p
  br label %done

done:
  ret void
}
