; The host part of a "package", the way a Julia-like frontend emits it for the CPU: its paths
; never reach the GPU runtime when run on the CPU, but the module still names it, in an error
; branch, in a table of function pointers, and in a helper compiled from device-flavoured code.
@msg = private unnamed_addr constant [12 x i8] c"BoundsError\00"
@allocators = global [2 x ptr] [ptr @malloc, ptr @gpu_malloc]

declare ptr @malloc(i64)
declare ptr @gpu_malloc(i64)
declare void @gpu_report_exception(ptr)
declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()

; Returns i, or reports a BoundsError the GPU way when i is out of range.
define i64 @checked_index(i64 %i, i64 %n) {
entry:
  %ok = icmp ult i64 %i, %n
  br i1 %ok, label %fine, label %throw
fine:
  ret i64 %i
throw:
  call void @gpu_report_exception(ptr @msg)
  ret i64 -1
}

; The allocator for a memory kind: 0 host, 1 device.
define ptr @allocator(i32 %which) {
  %idx = sext i32 %which to i64
  %slot = getelementptr [2 x ptr], ptr @allocators, i64 0, i64 %idx
  %f = load ptr, ptr %slot
  ret ptr %f
}

define i32 @thread_index() {
  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  ret i32 %t
}

; 0 + 1 + ... + (n - 1)
define i64 @sum_to(i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %acc = phi i64 [ 0, %entry ], [ %sum, %loop ]
  %sum = add i64 %acc, %i
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret i64 %sum
}
