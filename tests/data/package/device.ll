; The device part of the same package: a kernel using the same runtime functions.
target triple = "nvptx64-nvidia-cuda"

@msg = private unnamed_addr constant [12 x i8] c"BoundsError\00"

declare ptr @gpu_malloc(i64)
declare void @gpu_free(ptr)
declare void @gpu_report_exception(ptr)
declare void @gpu_signal_exception()
declare void @llvm.trap()
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()

define ptx_kernel void @fill(ptr addrspace(1) %out, i32 %n) {
entry:
  %i = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %ok = icmp slt i32 %i, %n
  br i1 %ok, label %work, label %throw
work:
  %tmp = call ptr @gpu_malloc(i64 4)
  store volatile i32 %i, ptr %tmp
  %v = load volatile i32, ptr %tmp
  call void @gpu_free(ptr %tmp)
  %i64 = sext i32 %i to i64
  %p = getelementptr i32, ptr addrspace(1) %out, i64 %i64
  store i32 %v, ptr addrspace(1) %p
  ret void
throw:
  call void @gpu_report_exception(ptr @msg)
  call void @gpu_signal_exception()
  call void @llvm.trap()
  unreachable
}
