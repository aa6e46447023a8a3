/* kcache's runtime library, device side: the functions of manifest.def, compiled to NVPTX
 * bitcode at build time (clang, C, no CUDA headers) and linked into device modules that call
 * them, only what is used, then internalized.
 *
 * Exceptions: any thread may report; the first one to report claims the info record
 * (kcache_exception_info) and fills in its thread, block, exception name and message.
 * gpu_signal_exception sets the status flag and fences system-wide, so a host loader that
 * synchronises and reads the record (cuModuleGetGlobal) sees a complete report. */

typedef unsigned long size_t;
typedef unsigned long long u64;

int vprintf(const char *format, void *args);
void *malloc(size_t size);
void free(void *ptr);

#include "kcache/exception_info.h"

#define NAME_BYTES KCACHE_EXCEPTION_NAME_BYTES
#define MESSAGE_BYTES KCACHE_EXCEPTION_MESSAGE_BYTES

/* The record in device memory, and where reports go: host-mapped memory when the loader set
 * the pointer, so the host can read the report even after a trap killed the context. */
struct kcache_exception_info kcache_exception_info;
struct kcache_exception_info *kcache_exception_info_ptr;

static struct kcache_exception_info *record(void) {
  struct kcache_exception_info *mapped = kcache_exception_info_ptr;
  return mapped != 0 ? mapped : &kcache_exception_info;
}

static unsigned int tid_x(void) { return __nvvm_read_ptx_sreg_tid_x(); }
static unsigned int tid_y(void) { return __nvvm_read_ptx_sreg_tid_y(); }
static unsigned int tid_z(void) { return __nvvm_read_ptx_sreg_tid_z(); }
static unsigned int bid_x(void) { return __nvvm_read_ptx_sreg_ctaid_x(); }
static unsigned int bid_y(void) { return __nvvm_read_ptx_sreg_ctaid_y(); }
static unsigned int bid_z(void) { return __nvvm_read_ptx_sreg_ctaid_z(); }

static u64 my_linear_id(void) {
  u64 block = ((u64)bid_z() * __nvvm_read_ptx_sreg_nctaid_y() + bid_y()) * __nvvm_read_ptx_sreg_nctaid_x() + bid_x();
  u64 thread = ((u64)tid_z() * __nvvm_read_ptx_sreg_ntid_y() + tid_y()) * __nvvm_read_ptx_sreg_ntid_x() + tid_x();
  u64 threads_per_block = (u64)__nvvm_read_ptx_sreg_ntid_x() * __nvvm_read_ptx_sreg_ntid_y() * __nvvm_read_ptx_sreg_ntid_z();
  return block * threads_per_block + thread + 1;
}

#include "record_claim.h"

void gpu_signal_exception(void) {
  __atomic_store_n(&record()->status, 1u, __ATOMIC_RELEASE);
  __nvvm_membar_sys();
}

int gpu_exception_pending(void) { return __atomic_load_n(&record()->status, __ATOMIC_ACQUIRE) != 0; }

void gpu_report_exception(const char *message) {
  struct {
    const char *message;
    unsigned int tx, ty, tz, bx, by, bz;
  } args = {message, tid_x(), tid_y(), tid_z(), bid_x(), bid_y(), bid_z()};
  vprintf("ERROR: a %s was thrown during kernel execution on thread (%u, %u, %u) in block (%u, %u, %u).\n", &args);
  if (owns_record()) copy_text(record()->message, message, MESSAGE_BYTES);
}

void gpu_report_exception_name(const char *name) {
  struct {
    const char *name;
  } args = {name};
  vprintf("ERROR: exception %s\n", &args);
  if (owns_record()) copy_text(record()->name, name, NAME_BYTES);
}

void gpu_report_exception_frame(int frame, const char *function, const char *file, int line) {
  struct {
    int frame;
    const char *function;
    const char *file;
    int line;
  } args = {frame, function, file, line};
  vprintf(" [%d] %s at %s:%d\n", &args);
}

void gpu_report_oom(u64 size) {
  struct {
    u64 size;
    unsigned int tx, bx;
  } args = {size, tid_x(), bid_x()};
  vprintf("ERROR: out of dynamic GPU memory (trying to allocate %llu bytes) on thread %u of block %u\n", &args);
  if (owns_record()) copy_text(record()->message, "out of dynamic GPU memory", MESSAGE_BYTES);
}

void *gpu_malloc(u64 size) { return malloc(size); }

void gpu_free(void *ptr) { free(ptr); }

#include "runtime_common.h"
