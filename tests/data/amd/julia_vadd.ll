; A kernel in the style GPUCompiler.jl emits for AMDGPU.jl, written by hand:
;   function vadd!(c, a, b)
;       i = (workgroupIdx().x - 1) * workgroupDim().x + workitemIdx().x
;       @inbounds c[i] = a[i] + b[i]   # without @inbounds: a bounds check on each access
;       return
;   end
; with c, a, b::ROCDeviceArray{Float32,1,1} passed by reference in the kernarg segment
; (pass_by_ref), the KernelState first, kernel names mangled C++-style (mangle_sig), and each
; bounds error lowered by lower_throw_extra! to rtlib's gpu_report_exception,
; gpu_signal_exception and a trap. The non-kernel helper keeps Julia's julia_<name>_<id> naming.
; ModuleID = 'start'
source_filename = "start"
target datalayout = "e-m:e-p:64:64-p1:64:64-p2:32:32-p3:32:32-p4:64:64-p5:32:32-p6:32:32-p7:160:256:256:32-p8:128:128:128:48-p9:192:256:256:32-i64:64-v16:16-v24:32-v32:32-v48:64-v96:128-v192:256-v256:256-v512:512-v1024:1024-v2048:2048-n32:64-S32-A5-G1-ni:7:8:9"
target triple = "amdgcn-amd-amdhsa"

%KernelState = type { i64, i64, i64, i64, i64 }
%ROCDeviceArray = type { [1 x i64], ptr addrspace(1), i64 }

@exception = private unnamed_addr addrspace(1) constant [29 x i8] c"julia_throw_boundserror_2514\00", align 1
@exception1 = private unnamed_addr addrspace(1) constant [29 x i8] c"julia_throw_boundserror_2514\00", align 1

declare void @gpu_report_exception(ptr)
declare void @gpu_signal_exception()
declare i32 @gpu_exception_pending()

; Function Attrs: cold noreturn nounwind
declare void @llvm.trap() #2

; Function Attrs: nounwind readnone speculatable
declare i32 @llvm.amdgcn.workitem.id.x() #1
declare i32 @llvm.amdgcn.workgroup.id.x() #1
declare ptr addrspace(4) @llvm.amdgcn.dispatch.ptr() #1

; Linear index of this work-item in the grid, 1-based, as Julia computes it.
define internal fastcc i64 @julia_global_index_2501() unnamed_addr #0 {
top:
  %0 = call i32 @llvm.amdgcn.workitem.id.x(), !range !0
  %1 = call i32 @llvm.amdgcn.workgroup.id.x(), !range !1
  %2 = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
  %3 = getelementptr inbounds i8, ptr addrspace(4) %2, i64 4
  %4 = load i16, ptr addrspace(4) %3, align 4, !range !2, !invariant.load !3
  %5 = zext i16 %4 to i64
  %6 = zext i32 %1 to i64
  %7 = mul i64 %6, %5
  %8 = zext i32 %0 to i64
  %9 = add i64 %7, %8
  %10 = add i64 %9, 1
  ret i64 %10
}

define amdgpu_kernel void @_Z5vadd_14ROCDeviceArrayI7Float32Li1ELi1EES1_S1_(%KernelState %state, ptr addrspace(4) byref(%ROCDeviceArray) align 8 %0, ptr addrspace(4) byref(%ROCDeviceArray) align 8 %1, ptr addrspace(4) byref(%ROCDeviceArray) align 8 %2) local_unnamed_addr #3 {
conversion:
  %c.ptr.addr = getelementptr inbounds %ROCDeviceArray, ptr addrspace(4) %0, i64 0, i32 1
  %c.ptr = load ptr addrspace(1), ptr addrspace(4) %c.ptr.addr, align 8
  %c.len.addr = getelementptr inbounds %ROCDeviceArray, ptr addrspace(4) %0, i64 0, i32 2
  %c.len = load i64, ptr addrspace(4) %c.len.addr, align 8
  %a.ptr.addr = getelementptr inbounds %ROCDeviceArray, ptr addrspace(4) %1, i64 0, i32 1
  %a.ptr = load ptr addrspace(1), ptr addrspace(4) %a.ptr.addr, align 8
  %a.len.addr = getelementptr inbounds %ROCDeviceArray, ptr addrspace(4) %1, i64 0, i32 2
  %a.len = load i64, ptr addrspace(4) %a.len.addr, align 8
  %b.ptr.addr = getelementptr inbounds %ROCDeviceArray, ptr addrspace(4) %2, i64 0, i32 1
  %b.ptr = load ptr addrspace(1), ptr addrspace(4) %b.ptr.addr, align 8
  br label %top

top:                                              ; preds = %conversion
  %3 = call fastcc i64 @julia_global_index_2501()
  %4 = add i64 %3, -1
  %.not = icmp ult i64 %4, %a.len
  br i1 %.not, label %L14, label %L11

L11:                                              ; preds = %top
  call void @gpu_report_exception(ptr addrspacecast (ptr addrspace(1) @exception to ptr))
  call void @gpu_signal_exception()
  call void @llvm.trap()
  unreachable

L14:                                              ; preds = %top
  ; a and b have the same length here (checked on the host), so one check covers both loads
  %5 = getelementptr inbounds float, ptr addrspace(1) %a.ptr, i64 %4
  %6 = load float, ptr addrspace(1) %5, align 4, !tbaa !4
  %7 = getelementptr inbounds float, ptr addrspace(1) %b.ptr, i64 %4
  %8 = load float, ptr addrspace(1) %7, align 4, !tbaa !4
  %9 = fadd float %6, %8
  %.not7 = icmp ult i64 %4, %c.len
  br i1 %.not7, label %L30, label %L27

L27:                                              ; preds = %L14
  call void @gpu_report_exception(ptr addrspacecast (ptr addrspace(1) @exception1 to ptr))
  call void @gpu_signal_exception()
  call void @llvm.trap()
  unreachable

L30:                                              ; preds = %L14
  %10 = getelementptr inbounds float, ptr addrspace(1) %c.ptr, i64 %4
  store float %9, ptr addrspace(1) %10, align 4, !tbaa !4
  ret void
}

; A second kernel of the same module: a grid-stride fill that stops early once another thread
; has raised an exception (rtlib's gpu_exception_pending).
define amdgpu_kernel void @_Z5fill_14ROCDeviceArrayI7Float32Li1ELi1EES0_(%KernelState %state, ptr addrspace(4) byref(%ROCDeviceArray) align 8 %0, float %1) local_unnamed_addr #3 {
conversion:
  %x.ptr.addr = getelementptr inbounds %ROCDeviceArray, ptr addrspace(4) %0, i64 0, i32 1
  %x.ptr = load ptr addrspace(1), ptr addrspace(4) %x.ptr.addr, align 8
  %x.len.addr = getelementptr inbounds %ROCDeviceArray, ptr addrspace(4) %0, i64 0, i32 2
  %x.len = load i64, ptr addrspace(4) %x.len.addr, align 8
  %2 = call fastcc i64 @julia_global_index_2501()
  %3 = icmp sgt i64 %2, %x.len
  br i1 %3, label %L40, label %L12

L12:                                              ; preds = %L20, %conversion
  %value_phi = phi i64 [ %2, %conversion ], [ %9, %L20 ]
  %4 = call i32 @gpu_exception_pending()
  %.not = icmp eq i32 %4, 0
  br i1 %.not, label %L20, label %L40

L20:                                              ; preds = %L12
  %5 = add i64 %value_phi, -1
  %6 = getelementptr inbounds float, ptr addrspace(1) %x.ptr, i64 %5
  store float %1, ptr addrspace(1) %6, align 4, !tbaa !4
  %7 = call ptr addrspace(4) @llvm.amdgcn.dispatch.ptr()
  %8 = getelementptr inbounds i8, ptr addrspace(4) %7, i64 12
  %grid = load i32, ptr addrspace(4) %8, align 4, !invariant.load !3
  %stride = zext i32 %grid to i64
  %9 = add i64 %value_phi, %stride
  %10 = icmp sgt i64 %9, %x.len
  br i1 %10, label %L40, label %L12

L40:                                              ; preds = %L20, %L12, %conversion
  ret void
}

attributes #0 = { nounwind "amdgpu-unsafe-fp-atomics"="true" }
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
