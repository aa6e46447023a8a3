; A kernel marked the pre-LLVM-20 way, as Julia's LLVM 18 and older clang emit it:
; a plain function named in !nvvm.annotations. It also carries clang's per-function
; target attributes, asking for PTX ISA 8.0.
target triple = "nvptx64-nvidia-cuda"

define void @scale(ptr addrspace(1) %p, float %s) #0 {
  %v = load float, ptr addrspace(1) %p
  %r = fmul float %v, %s
  store float %r, ptr addrspace(1) %p
  ret void
}

define internal float @helper(float %x) #0 {
  %r = fadd float %x, 1.0
  ret float %r
}

attributes #0 = { "target-cpu"="sm_80" "target-features"="+ptx80,+sm_80" }

!nvvm.annotations = !{!0}
!0 = !{ptr @scale, !"kernel", i32 1}
