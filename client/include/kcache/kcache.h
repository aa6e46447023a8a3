/* libkcache's C API: what Julia (ccall), Python (ctypes) and Rust bind to.
 *
 * Opaque handles, explicit lengths, no C++ types and no exceptions across the boundary. Every
 * call returns a kcache_status: KCACHE_OK (0), or the gRPC status code of the failure, with a
 * message for a person from kcache_last_error() (per thread, valid until that thread's next
 * call). A client may be used from several threads at once. */
#ifndef KCACHE_KCACHE_H
#define KCACHE_KCACHE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef int kcache_status;
#define KCACHE_OK 0
#define KCACHE_INVALID_ARGUMENT 3
#define KCACHE_DEADLINE_EXCEEDED 4
#define KCACHE_NOT_FOUND 5
#define KCACHE_RESOURCE_EXHAUSTED 8
#define KCACHE_FAILED_PRECONDITION 9
#define KCACHE_INTERNAL 13
#define KCACHE_UNAVAILABLE 14

enum kcache_side { KCACHE_SIDE_DEVICE = 1, KCACHE_SIDE_HOST = 2 };
/* KCACHE_FORMAT_CUDA: CUDA C++ source, compiled by the daemon's NVRTC (never inferred). */
enum kcache_format {
  KCACHE_FORMAT_INFER = 0, KCACHE_FORMAT_BITCODE = 1, KCACHE_FORMAT_TEXT = 2, KCACHE_FORMAT_PTX = 3, KCACHE_FORMAT_CUDA = 4
};
/* KCACHE_KIND_LTOIR: NVVM IR for link-time optimisation (CUDA C++ jobs), fetched by kind only. */
enum kcache_kind {
  KCACHE_KIND_ANY = 0, KCACHE_KIND_PTX = 1, KCACHE_KIND_CUBIN = 2, KCACHE_KIND_OBJECT = 3, KCACHE_KIND_LTOIR = 4,
  KCACHE_KIND_HSACO = 5, KCACHE_KIND_AMDGCN = 6
};

typedef struct kcache_client kcache_client;
typedef struct kcache_image kcache_image;
typedef struct kcache_result kcache_result;

/* A header a CUDA C++ job sends, under the name its #include spells ("detail/math.cuh"). */
typedef struct kcache_header {
  const char *name;
  const void *data;
  size_t size;
} kcache_header;

/* A module linked after a job's first one (relocatable device code: clang -fgpu-rdc output,
 * multi-file projects). */
typedef struct kcache_module {
  const void *data;
  size_t size;
  int format;                       /* kcache_format */
} kcache_module;

/* A compile job. Call kcache_job_init first, then set what differs from its defaults.
 *
 * The struct grows at its end only. struct_size says how much of it the caller knows (the
 * sizeof it was compiled with), so a library newer than its caller reads no field the caller
 * never wrote. Bindings written by hand (ccall, ctypes) call kcache_job_init_size with their
 * own size. */
typedef struct kcache_job {
  size_t struct_size;               /* set by kcache_job_init */
  int side;                         /* kcache_side (default device) */
  int format;                       /* kcache_format (default inferred from the bytes) */
  const char *target;               /* target triple; NULL: the side's default */
  int opt_level;                    /* 0..3 (default 2) */
  int debug_info;                   /* nonzero: keep full debug info */
  int lineinfo;                     /* nonzero: keep line tables */
  int fast_math;                    /* nonzero: unsafe floating-point optimisations */
  const char *const *entry_points;  /* kernels to export, entry_point_count of them */
  size_t entry_point_count;
  const char *cpu;                  /* host CPU; NULL: generic */
  int host_stubs;                   /* host: nonzero stubs device-only references, zero rejects them */
  const char *const *archs;         /* archs to compile for (fetch_or_compile adds the device's) */
  size_t arch_count;
  const int *kinds;                 /* kcache_kind values to emit; none: PTX (device) or object (host) */
  size_t kind_count;
  /* Device jobs: modules linked with the first into one image per arch, in order (the key covers
   * each). IR is linked by LLVM, PTX by nvJitLink; with PTX among them, emit cubin only. */
  const kcache_module *linked_modules;
  size_t linked_module_count;
  /* The CUDA version of the driver that will load the images, as cuDriverGetVersion reports it
   * (12040 for 12.4): PTX comes at an ISA that driver JITs, and PTX in place of cubins it cannot
   * load. KCACHE_DRIVER_THIS_MACHINE (the default) asks this machine's driver, if it has one;
   * KCACHE_DRIVER_NONE states none (images for the daemon's own toolkit). */
  long driver_version;
  /* CUDA C++ jobs (format KCACHE_FORMAT_CUDA; the module is the source). The daemon reads no
   * file of the caller's: `headers` travel with the source, and libkcache adds every further
   * header the source (and those headers) include that it finds in `include_dirs` (as
   * `kcache compile -I`); the toolkit's own (<cuda_fp16.h>) stay on the daemon. NVRTC options
   * come from the daemon's allow-list (-DN=4, -std=c++17, --use_fast_math, -rdc=true, ...); the
   * arch comes from `archs`. Each name expression ("scale<float>") comes back lowered with every
   * image (kcache_image_lowered_name). */
  const kcache_header *headers;
  size_t header_count;
  const char *const *include_dirs;
  size_t include_dir_count;
  const char *const *nvrtc_options;
  size_t nvrtc_option_count;
  const char *const *name_expressions;
  size_t name_expression_count;
  /* AMD jobs (gfx archs): the newest HSA code object version the runtime that loads the images
   * takes (4 for ROCm 5 and Debian's HIP 5.2); 0 (the default): the daemon's own, 5, and 6 for
   * generic targets, which a lower version refuses. */
  long amd_code_object_version;
} kcache_job;

#define KCACHE_DRIVER_THIS_MACHINE 0L
#define KCACHE_DRIVER_NONE (-1L)

/* Fills the first `struct_size` bytes of `job` with the defaults, and job->struct_size. */
void kcache_job_init_size(kcache_job *job, size_t struct_size);
#define kcache_job_init(job) kcache_job_init_size((job), sizeof(kcache_job))

/* The message of this thread's last failed call ("" when it succeeded). */
const char *kcache_last_error(void);

/* A client of the daemon at `server` (HOST:PORT; NULL: $KCACHE_SERVER, else 127.0.0.1:7878), each
 * call limited to `timeout_seconds` (<= 0: ten minutes), its retries of an unreachable daemon
 * included. Connects lazily: an unreachable daemon is reported by the first call that needs it. */
kcache_status kcache_connect(const char *server, double timeout_seconds, kcache_client **out);
void kcache_client_free(kcache_client *client);

/* The key the daemon gives this job, computed here (asks the daemon only for its toolchain
 * fingerprint, once). Writes 64 hex digits and a NUL to key_hex. */
kcache_status kcache_compute_key(kcache_client *client, const void *module, size_t module_size, const kcache_job *job,
                                 char key_hex[65]);

/* The best stored image of `key_hex` for a device of `arch` (sm_90; for the host side, x86_64),
 * restricted to `kind` unless KCACHE_KIND_ANY, that this machine's driver (where it has one)
 * loads. KCACHE_NOT_FOUND when there is none. */
kcache_status kcache_fetch(kcache_client *client, const char *key_hex, const char *arch, int side, int kind,
                           kcache_image **out);
/* kcache_fetch for the driver that will load the image: cuDriverGetVersion's number (12040 for
 * 12.4), KCACHE_DRIVER_THIS_MACHINE (what kcache_fetch does) or KCACHE_DRIVER_NONE (no driver
 * stated: any image, cubins first). */
kcache_status kcache_fetch_for_driver(kcache_client *client, const char *key_hex, const char *arch, int side, int kind,
                                      long driver_version, kcache_image **out);

/* Fetch, and on a miss compile then fetch; retries while the daemon is unavailable. */
kcache_status kcache_fetch_or_compile(kcache_client *client, const void *module, size_t module_size,
                                      const kcache_job *job, const char *device_arch, kcache_image **out);

/* Compiles `job` (or hits) and returns every image it asks for, archs x kinds, with its bytes:
 * for LTO-IR, PTX and cubin alike, and for a build step that wants all of them. */
kcache_status kcache_compile(kcache_client *client, const void *module, size_t module_size, const kcache_job *job,
                             kcache_result **out);
const char *kcache_result_key(const kcache_result *result);     /* 64 hex digits */
int kcache_result_hit(const kcache_result *result);             /* nonzero: nothing was compiled */
size_t kcache_result_image_count(const kcache_result *result);
const kcache_image *kcache_result_image(const kcache_result *result, size_t index); /* owned by the result */
void kcache_result_free(kcache_result *result);

/* Bundles made by `kcache precompile`, served with no daemon: the same selection rules (an image
 * this machine's driver, where it has one, loads), and a file whose digest or size does not match
 * the bundle's index is refused (KCACHE_INTERNAL; one larger than the index says, unread), one that
 * is not a regular file (a FIFO, a device) too (KCACHE_INVALID_ARGUMENT). */
typedef struct kcache_bundle kcache_bundle;
kcache_status kcache_bundle_open(const char *dir, kcache_bundle **out);
kcache_status kcache_bundle_fetch(const kcache_bundle *bundle, const char *key_hex, const char *arch, int kind,
                                  kcache_image **out);
/* kcache_bundle_fetch for a stated driver, as kcache_fetch_for_driver. */
kcache_status kcache_bundle_fetch_for_driver(const kcache_bundle *bundle, const char *key_hex, const char *arch,
                                             int kind, long driver_version, kcache_image **out);
void kcache_bundle_free(kcache_bundle *bundle);

/* Each accessor takes NULL (a failed call's image) and reads it as empty: NULL data, size 0, "". */
const void *kcache_image_data(const kcache_image *image);
size_t kcache_image_size(const kcache_image *image);
const char *kcache_image_arch(const kcache_image *image);
int kcache_image_kind(const kcache_image *image);      /* kcache_kind */
int kcache_image_needs_jit(const kcache_image *image); /* PTX the driver compiles at load time */
const char *kcache_image_sha256(const kcache_image *image);
/* CUDA C++ jobs: the image's name expressions and their lowered (mangled) names, in the order of
 * the job's sorted expressions; out of range reads as "". */
size_t kcache_image_lowered_name_count(const kcache_image *image);
const char *kcache_image_name_expression(const kcache_image *image, size_t index);
const char *kcache_image_lowered_name(const kcache_image *image, size_t index);
void kcache_image_free(kcache_image *image);

#ifdef __cplusplus
}
#endif

#endif /* KCACHE_KCACHE_H */
