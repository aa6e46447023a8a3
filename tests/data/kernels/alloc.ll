; scratch: allocates device heap memory through rtlib's gpu_malloc/gpu_free.
target triple = "nvptx64-nvidia-cuda"

declare ptr @gpu_malloc(i64)
declare void @gpu_free(ptr)

define ptx_kernel void @scratch(ptr addrspace(1) %out, i64 %n) {
entry:
  %buf = call ptr @gpu_malloc(i64 %n)
  %none = icmp eq ptr %buf, null
  br i1 %none, label %fail, label %use

use:
  store volatile i8 7, ptr %buf
  %v = load volatile i8, ptr %buf
  store i8 %v, ptr addrspace(1) %out
  call void @gpu_free(ptr %buf)
  ret void

fail:
  store i8 0, ptr addrspace(1) %out
  ret void
}
