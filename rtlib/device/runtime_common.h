/* The rtlib functions both targets write the same way (device/rtlib.c, device/amdgcn.c), in
 * terms of the target's own gpu_malloc and reporting functions; included at the end of each. */

void *gpu_gc_pool_alloc(u64 size) {
  void *p = gpu_malloc(size);
  if (p == 0) {
    gpu_report_oom(size);
    gpu_signal_exception();
    __builtin_trap();
  }
  return p;
}

/* C++ ABI functions that device code with virtual functions refers to: a vtable slot of a pure
 * (or deleted) virtual function points at them. Calling one is a bug in the program; it reports
 * a device exception naming the function, like any other, and stops the kernel. */
static void abi_violation(const char *name, const char *message) {
  gpu_report_exception_name(name);
  gpu_report_exception(message);
  gpu_signal_exception();
  __builtin_trap();
}

void __cxa_pure_virtual(void) { abi_violation("__cxa_pure_virtual", "pure virtual function called"); }

void __cxa_deleted_virtual(void) { abi_violation("__cxa_deleted_virtual", "deleted virtual function called"); }
