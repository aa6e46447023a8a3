/* kcache's runtime library for AMD GPUs: the functions of manifest.def and the C++ ABI
 * functions, with the semantics and exception record of device/rtlib.c, compiled to amdgcn
 * bitcode at build time (clang, C, builtins only, no HIP headers).
 *
 * The ROCm device libraries supply the rest: printing goes through ockl's printf hostcall API
 * and the heap through ockl's device allocator. Those functions stay declarations here; the
 * device pipeline links ockl (and its oclc control constants) after rtlib, only what is used.
 *
 * Exceptions: any thread may report; the first one to report claims the info record
 * (kcache_exception_info) and fills in its thread, block, exception name and message.
 * gpu_signal_exception sets the status flag and fences at system scope, so a host loader that
 * synchronises and reads the record (hipModuleGetGlobal) sees a complete report. */

typedef unsigned long long u64;
typedef unsigned int u32;
typedef unsigned short u16;

#define GLOBAL __attribute__((address_space(1)))
#define CONSTANT __attribute__((address_space(4)))
/* clang hides every amdgcn symbol by default; the loader must find these two by name. */
#define LOADER_VISIBLE __attribute__((visibility("protected")))

/* ockl (rocm-device-libs): the printf hostcall protocol as clang emits it for HIP's printf.
 * A descriptor from printf_begin is threaded through the appends; the last append sets
 * is_last. Strings are passed with their length including the terminator (0 for null). */
u64 __ockl_printf_begin(u64 version);
u64 __ockl_printf_append_args(u64 desc, u32 num_args, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5,
                              u64 a6, u32 is_last);
u64 __ockl_printf_append_string_n(u64 desc, const char *str, u64 length, u32 is_last);
GLOBAL void *__ockl_dm_alloc(u64 size);
void __ockl_dm_dealloc(u64 address);

#include "kcache/exception_info.h"

#define NAME_BYTES KCACHE_EXCEPTION_NAME_BYTES
#define MESSAGE_BYTES KCACHE_EXCEPTION_MESSAGE_BYTES

/* The record in device memory, and where reports go: host-mapped memory when the loader set
 * the pointer, so the host can read the report even after a trap killed the queue. */
LOADER_VISIBLE struct kcache_exception_info kcache_exception_info;
LOADER_VISIBLE struct kcache_exception_info *kcache_exception_info_ptr;

static struct kcache_exception_info *record(void) {
  struct kcache_exception_info *mapped = kcache_exception_info_ptr;
  return mapped != 0 ? mapped : &kcache_exception_info;
}

/* The launch's AQL packet (hsa_kernel_dispatch_packet_t); its layout is fixed by the HSA spec,
 * unlike the implicit kernel arguments, which differ between code object versions. */
struct dispatch_packet {
  u16 header;
  u16 setup;
  u16 workgroup_size[3];
  u16 reserved0;
  u32 grid_size[3]; /* in work-items */
};

static const CONSTANT struct dispatch_packet *packet(void) {
  return (const CONSTANT struct dispatch_packet *)__builtin_amdgcn_dispatch_ptr();
}

static u32 tid_x(void) { return __builtin_amdgcn_workitem_id_x(); }
static u32 tid_y(void) { return __builtin_amdgcn_workitem_id_y(); }
static u32 tid_z(void) { return __builtin_amdgcn_workitem_id_z(); }
static u32 bid_x(void) { return __builtin_amdgcn_workgroup_id_x(); }
static u32 bid_y(void) { return __builtin_amdgcn_workgroup_id_y(); }
static u32 bid_z(void) { return __builtin_amdgcn_workgroup_id_z(); }

static u64 block_size(int dim) { return packet()->workgroup_size[dim]; }

/* Workgroups along a dimension; the last one may be partial, as HIP's gridDim counts it. */
static u64 block_count(int dim) {
  u64 size = block_size(dim);
  return (packet()->grid_size[dim] + size - 1) / size;
}

static u64 my_linear_id(void) {
  u64 block = ((u64)bid_z() * block_count(1) + bid_y()) * block_count(0) + bid_x();
  u64 thread = ((u64)tid_z() * block_size(1) + tid_y()) * block_size(0) + tid_x();
  u64 threads_per_block = block_size(0) * block_size(1) * block_size(2);
  return block * threads_per_block + thread + 1;
}

#include "record_claim.h"

/* Printing: one small helper per argument kind, each threading the descriptor. */
static u64 print_begin(const char *format) {
  u64 desc = __ockl_printf_begin(0);
  u64 length = 0;
  while (format[length] != 0) ++length;
  return __ockl_printf_append_string_n(desc, format, length + 1, 0);
}

static u64 print_string(u64 desc, const char *text, u32 is_last) {
  u64 length = 0;
  if (text != 0) {
    while (text[length] != 0) ++length;
    ++length;
  }
  return __ockl_printf_append_string_n(desc, text, length, is_last);
}

/* Up to seven integer arguments, zero-extended to 64 bits as clang passes them. */
static u64 print_ints(u64 desc, u32 count, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4, u64 a5, u32 is_last) {
  return __ockl_printf_append_args(desc, count, a0, a1, a2, a3, a4, a5, 0, is_last);
}

void gpu_signal_exception(void) {
  __atomic_store_n(&record()->status, 1u, __ATOMIC_RELEASE);
  __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, ""); /* "" is system scope */
}

int gpu_exception_pending(void) { return __atomic_load_n(&record()->status, __ATOMIC_ACQUIRE) != 0; }

void gpu_report_exception(const char *message) {
  u64 desc = print_begin(
      "ERROR: a %s was thrown during kernel execution on thread (%u, %u, %u) in block (%u, %u, %u).\n");
  desc = print_string(desc, message, 0);
  print_ints(desc, 6, tid_x(), tid_y(), tid_z(), bid_x(), bid_y(), bid_z(), 1);
  if (owns_record()) copy_text(record()->message, message, MESSAGE_BYTES);
}

void gpu_report_exception_name(const char *name) {
  u64 desc = print_begin("ERROR: exception %s\n");
  print_string(desc, name, 1);
  if (owns_record()) copy_text(record()->name, name, NAME_BYTES);
}

void gpu_report_exception_frame(int frame, const char *function, const char *file, int line) {
  u64 desc = print_begin(" [%d] %s at %s:%d\n");
  desc = print_ints(desc, 1, (u32)frame, 0, 0, 0, 0, 0, 0);
  desc = print_string(desc, function, 0);
  desc = print_string(desc, file, 0);
  print_ints(desc, 1, (u32)line, 0, 0, 0, 0, 0, 1);
}

void gpu_report_oom(u64 size) {
  u64 desc = print_begin(
      "ERROR: out of dynamic GPU memory (trying to allocate %llu bytes) on thread %u of block %u\n");
  print_ints(desc, 3, size, tid_x(), bid_x(), 0, 0, 0, 1);
  if (owns_record()) copy_text(record()->message, "out of dynamic GPU memory", MESSAGE_BYTES);
}

void *gpu_malloc(u64 size) { return (void *)__ockl_dm_alloc(size); }

void gpu_free(void *ptr) { __ockl_dm_dealloc((u64)ptr); }

#include "runtime_common.h"
