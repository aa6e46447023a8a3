; checked_store: a bounds check whose error path throws the way GPUCompiler.jl lowers `throw`:
; report the exception through rtlib, signal it, trap.
target triple = "nvptx64-nvidia-cuda"

@msg = private unnamed_addr constant [12 x i8] c"BoundsError\00"

declare void @gpu_report_exception(ptr)
declare void @gpu_signal_exception()
declare void @llvm.trap()
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()

define ptx_kernel void @checked_store(ptr addrspace(1) %a, i32 %n) {
entry:
  %i = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ok = icmp slt i32 %i, %n
  br i1 %ok, label %store, label %throw

store:
  %i64 = sext i32 %i to i64
  %p = getelementptr i32, ptr addrspace(1) %a, i64 %i64
  store i32 %i, ptr addrspace(1) %p
  ret void

throw:
  call void @gpu_report_exception(ptr @msg)
  call void @gpu_signal_exception()
  call void @llvm.trap()
  unreachable
}
