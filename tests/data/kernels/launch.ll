; parent launches child<<<1, 32>>> on the device (dynamic parallelism), as clang -x cuda -fgpu-rdc
; emits it for: __global__ void child(int *p) { p[threadIdx.x] = 1; }  __global__ void parent(int *p) { child<<<1, 32>>>(p); }
target triple = "nvptx64-nvidia-cuda"

%struct.dim3 = type { i32, i32, i32 }

define ptx_kernel void @_Z5childPi(ptr noundef writeonly captures(none) %0) {
  %2 = tail call noundef i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %3 = zext nneg i32 %2 to i64
  %4 = getelementptr inbounds nuw i32, ptr %0, i64 %3
  store i32 1, ptr %4, align 4
  ret void
}

define ptx_kernel void @_Z6parentPi(ptr noundef %0) {
  %2 = alloca %struct.dim3, align 8
  %3 = alloca %struct.dim3, align 8
  %4 = tail call noundef ptr @__cudaCDP2GetParameterBuffer(i64 noundef 64, i64 noundef 8)
  %5 = icmp eq ptr %4, null
  br i1 %5, label %12, label %6

6:                                                ; preds = %1
  store ptr %0, ptr %4, align 64
  call void @llvm.lifetime.start.p0(ptr nonnull %3)
  call void @llvm.lifetime.start.p0(ptr nonnull %2)
  store i32 32, ptr %2, align 8
  %7 = getelementptr inbounds nuw i8, ptr %2, i64 4
  store i32 1, ptr %7, align 4
  %8 = getelementptr inbounds nuw i8, ptr %2, i64 8
  store i32 1, ptr %8, align 8
  store i32 1, ptr %3, align 8
  %9 = getelementptr inbounds nuw i8, ptr %3, i64 4
  store i32 1, ptr %9, align 4
  %10 = getelementptr inbounds nuw i8, ptr %3, i64 8
  store i32 1, ptr %10, align 8
  %11 = tail call noundef i32 @__cudaCDP2LaunchDevice(ptr noundef nonnull @_Z5childPi, ptr noundef nonnull %4, ptr noundef nonnull byval(%struct.dim3) align 4 %3, ptr noundef nonnull byval(%struct.dim3) align 4 %2, i32 noundef 0, ptr noundef null)
  call void @llvm.lifetime.end.p0(ptr nonnull %3)
  call void @llvm.lifetime.end.p0(ptr nonnull %2)
  br label %12

12:                                               ; preds = %6, %1
  ret void
}

declare noundef range(i32 0, 1024) i32 @llvm.nvvm.read.ptx.sreg.tid.x()

declare ptr @__cudaCDP2GetParameterBuffer(i64 noundef, i64 noundef)

declare i32 @__cudaCDP2LaunchDevice(ptr noundef, ptr noundef, ptr noundef byval(%struct.dim3) align 4, ptr noundef byval(%struct.dim3) align 4, i32 noundef, ptr noundef)

declare void @llvm.lifetime.start.p0(ptr captures(none))

declare void @llvm.lifetime.end.p0(ptr captures(none))



