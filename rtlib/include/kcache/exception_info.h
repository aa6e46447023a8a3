/* The exception record rtlib fills on the device and a host loader reads: one layout for both
 * (C, included by rtlib/device/rtlib.c and by the loader). The first thread to report claims
 * the record; gpu_signal_exception sets `status` and fences system-wide.
 *
 * Where it lives: the module's device global KCACHE_EXCEPTION_INFO_SYMBOL, unless the host sets
 * the device global pointer KCACHE_EXCEPTION_INFO_POINTER_SYMBOL to host-mapped memory; then
 * rtlib writes there, and the host can read the record even after a trap has killed the
 * context. */
#ifndef KCACHE_EXCEPTION_INFO_H
#define KCACHE_EXCEPTION_INFO_H

#define KCACHE_EXCEPTION_INFO_SYMBOL "kcache_exception_info"
#define KCACHE_EXCEPTION_INFO_POINTER_SYMBOL "kcache_exception_info_ptr"
#define KCACHE_EXCEPTION_NAME_BYTES 64
#define KCACHE_EXCEPTION_MESSAGE_BYTES 256

struct kcache_exception_info {
  unsigned int status;          /* 0: no exception; 1: an exception was signalled */
  unsigned int reserved;
  unsigned long long owner;     /* 1 + linear id of the thread that claimed the record; 0: unclaimed */
  unsigned int thread[3];
  unsigned int block[3];
  char name[KCACHE_EXCEPTION_NAME_BYTES];       /* exception type name, if reported */
  char message[KCACHE_EXCEPTION_MESSAGE_BYTES];
};

#endif /* KCACHE_EXCEPTION_INFO_H */
