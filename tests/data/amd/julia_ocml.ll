; A math kernel in the style GPUCompiler.jl emits for AMDGPU.jl, written by hand:
;   function damped_sin!(y, x, rate)
;       i = workitemIdx().x + (workgroupIdx().x - 1) * workgroupDim().x
;       y[i] = sin(x[i]) * exp(-rate * x[i])   # bounds-checked
;       return
;   end
; AMDGPU.jl's device math is `ccall("extern __ocml_sin_f32", llvmcall, ...)`, so the module
; declares the ocml functions and the device pipeline links ocml. Bounds errors go to rtlib,
; through a julia_throw_boundserror_* helper that lower_throw_extra! has not inlined.
; ModuleID = 'start'
source_filename = "start"
target datalayout = "e-m:e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9"
target triple = "amdgcn-amd-amdhsa"

%KernelState = type { i64, i64, i64, i64, i64 }
%ROCDeviceArray = type { [1 x i64], ptr addrspace(1), i64 }

@exception = private unnamed_addr addrspace(1) constant [10 x i8] c"exception\00", align 1
@di_func = private unnamed_addr addrspace(1) constant [12 x i8] c"damped_sin!\00", align 1
@di_file = private unnamed_addr addrspace(1) constant [8 x i8] c"math.jl\00", align 1
@name = private unnamed_addr addrspace(1) constant [12 x i8] c"BoundsError\00", align 1

declare float @__ocml_sin_f32(float)
declare float @__ocml_exp_f32(float)

declare void @gpu_report_exception(ptr)
declare void @gpu_report_exception_name(ptr)
declare void @gpu_report_exception_frame(i32, ptr, ptr, i32)
declare void @gpu_signal_exception()

; Function Attrs: cold noreturn nounwind
declare void @llvm.trap() #2
; Function Attrs: nounwind readnone speculatable
declare i32 @llvm.amdgcn.workitem.id.x() #1
declare i32 @llvm.amdgcn.workgroup.id.x() #1
declare ptr addrspace(4) @llvm.amdgcn.dispatch.ptr() #1

; Julia at debug level 2: the exception's name and a backtrace frame before the signal.
; Function Attrs: noinline noreturn
define internal fastcc void @julia_throw_boundserror_3120() unnamed_addr #0 {
top:
  call void @gpu_report_exception_name(ptr addrspacecast (ptr addrspace(1) @name to ptr))
  call void @gpu_report_exception_frame(i32 1, ptr addrspacecast (ptr addrspace(1) @di_func to ptr), ptr addrspacecast (ptr addrspace(1) @di_file to ptr), i32 4)
  call void @gpu_report_exception(ptr addrspacecast (ptr addrspace(1) @exception to ptr))
  call void @gpu_signal_exception()
  call void @llvm.trap()
  unreachable
}

define amdgpu_kernel void @_Z11damped_sin_14ROCDeviceArrayI7Float32Li1ELi1EES1_S0_(%KernelState %state, ptr addrspace(4) byref(%ROCDeviceArray) align 8 %0, ptr addrspace(4) byref(%ROCDeviceArray) align 8 %1, float %2) local_unnamed_addr #3 {
conversion:
  %y.ptr.addr = getelementptr inbounds %ROCDeviceArray, ptr addrspace(4) %0, i64 0, i32 1
  %y.ptr = load ptr addrspace(1), ptr addrspace(4) %y.ptr.addr, align 8
  %y.len.addr = getelementptr inbounds %ROCDeviceArray, ptr addrspace(4) %0, i64 0, i32 2
  %y.len = load i64, ptr addrspace(4) %y.len.addr, align 8
  %x.ptr.addr = getelementptr inbounds %ROCDeviceArray, ptr addrspace(4) %1, i64 0, i32 1
  %x.ptr = load ptr addrspace(1), ptr addrspace(4) %x.ptr.addr, align 8
  %x.len.addr = getelementptr inbounds %ROCDeviceArray, ptr addrspace(4) %1, i64 0, i32 2
  %x.len = load i64, ptr addrspace(4) %x.len.addr, align 8
  br label %top

top:                                              ; preds = %conversion
  %3 = call i32 @llvm.amdgcn.workitem.id.x(), !range !0
  %4 = call i32 @llvm.amdgcn.workgroup.id.x(), !range !1
  %5 = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
  %6 = getelementptr inbounds i8, ptr addrspace(4) %5, i64 4
  %7 = load i16, ptr addrspace(4) %6, align 4, !range !2, !invariant.load !3
  %8 = zext i16 %7 to i64
  %9 = zext i32 %4 to i64
  %10 = mul i64 %9, %8
  %11 = zext i32 %3 to i64
  %12 = add i64 %10, %11
  %.not = icmp ult i64 %12, %x.len
  br i1 %.not, label %L20, label %L17

L17:                                              ; preds = %top
  call fastcc void @julia_throw_boundserror_3120()
  unreachable

L20:                                              ; preds = %top
  %13 = getelementptr inbounds float, ptr addrspace(1) %x.ptr, i64 %12
  %14 = load float, ptr addrspace(1) %13, align 4, !tbaa !4
  %15 = call float @__ocml_sin_f32(float %14)
  %16 = fneg float %2
  %17 = fmul float %16, %14
  %18 = call float @__ocml_exp_f32(float %17)
  %19 = fmul float %15, %18
  %.not9 = icmp ult i64 %12, %y.len
  br i1 %.not9, label %L38, label %L35

L35:                                              ; preds = %L20
  call fastcc void @julia_throw_boundserror_3120()
  unreachable

L38:                                              ; preds = %L20
  %20 = getelementptr inbounds float, ptr addrspace(1) %y.ptr, i64 %12
  store float %19, ptr addrspace(1) %20, align 4, !tbaa !4
  ret void
}

attributes #0 = { noinline noreturn "amdgpu-unsafe-fp-atomics"="true" }
attributes #1 = { nounwind readnone speculatable }
attributes #2 = { cold noreturn nounwind }
attributes #3 = { "amdgpu-unsafe-fp-atomics"="true" "amdgpu-flat-work-group-size"="1,1024" }

!0 = !{i32 0, i32 1024}
!1 = !{i32 0, i32 -1}
!2 = !{i16 1, i16 1025}
!3 = !{}
!4 = !{!5, !5, i64 0, i64 0}
!5 = !{!"custom_tbaa_addrspace(1)", !6, i64 0}
!6 = !{!"custom_tbaa"}
