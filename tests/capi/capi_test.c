/* The C API from C: connect, compute a key, miss, fetch-or-compile, fetch by key, bad input.
 * Usage: kcache_capi_test SERVER MODULE.ll [TIMEOUT_SECONDS] ; prints "capi ok" and exits 0 when every check holds. */
#include <kcache/kcache.h>

#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      fprintf(stderr, "%s:%d: check failed: %s (%s)\n", __FILE__, __LINE__, #cond, \
              kcache_last_error());                                                 \
      ++failures;                                                                   \
    }                                                                               \
  } while (0)

static char *read_all(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *data = malloc((size_t)n);
  *size = fread(data, 1, (size_t)n, f);
  fclose(f);
  return data;
}

/* kcache_capi_test bundle DIR KEY: serves KEY for sm_86 from a bundle, with no daemon. */
static int bundle_mode(const char *dir, const char *key) {
  kcache_bundle *bundle = NULL;
  CHECK(kcache_bundle_open(dir, &bundle) == KCACHE_OK);
  kcache_image *image = NULL;
  CHECK(kcache_bundle_fetch(bundle, key, "sm_86", KCACHE_KIND_ANY, &image) == KCACHE_OK);
  CHECK(image != NULL && kcache_image_size(image) > 0 && strcmp(kcache_image_arch(image), "sm_80") == 0);
  kcache_image *none = NULL;
  CHECK(kcache_bundle_fetch(bundle, key, "sm_75", KCACHE_KIND_ANY, &none) == KCACHE_NOT_FOUND);
  kcache_bundle *missing = NULL;
  CHECK(kcache_bundle_open("/nonexistent/bundle", &missing) == KCACHE_NOT_FOUND);
  kcache_image_free(image);
  kcache_bundle_free(bundle);
  if (failures != 0) return 1;
  puts("capi bundle ok");
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 4 && strcmp(argv[1], "bundle") == 0) return bundle_mode(argv[2], argv[3]);
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: %s SERVER MODULE.ll [TIMEOUT_SECONDS] | %s bundle DIR KEY\n", argv[0], argv[0]);
    return 2;
  }
  /* Each call's deadline, which bounds its retries of an unreachable daemon too. */
  double timeout = argc == 4 ? atof(argv[3]) : 60;
  size_t size = 0;
  char *module = read_all(argv[2], &size);
  if (module == NULL) return 2;

  kcache_client *client = NULL;
  CHECK(kcache_connect(argv[1], timeout, &client) == KCACHE_OK);

  kcache_job job;
  kcache_job_init(&job);
  char key[65];
  CHECK(kcache_compute_key(client, module, size, &job, key) == KCACHE_OK);
  CHECK(strlen(key) == 64);

  kcache_image *image = NULL;
  CHECK(kcache_fetch(client, key, "sm_90", KCACHE_SIDE_DEVICE, KCACHE_KIND_ANY, &image) == KCACHE_NOT_FOUND);
  CHECK(strstr(kcache_last_error(), key) != NULL);

  CHECK(kcache_fetch_or_compile(client, module, size, &job, "sm_90", &image) == KCACHE_OK);
  CHECK(strcmp(kcache_last_error(), "") == 0);
  CHECK(image != NULL && kcache_image_size(image) > 0);
  CHECK(strcmp(kcache_image_arch(image), "sm_90") == 0);
  CHECK(kcache_image_kind(image) == KCACHE_KIND_PTX);
  CHECK(kcache_image_needs_jit(image) == 1);
  CHECK(memmem(kcache_image_data(image), kcache_image_size(image), ".entry saxpy", 12) != NULL);

  kcache_image *again = NULL;
  CHECK(kcache_fetch(client, key, "sm_90", KCACHE_SIDE_DEVICE, KCACHE_KIND_PTX, &again) == KCACHE_OK);
  CHECK(again != NULL && strcmp(kcache_image_sha256(again), kcache_image_sha256(image)) == 0);

  kcache_image *none = NULL;
  CHECK(kcache_fetch(client, "not-a-key", "sm_90", KCACHE_SIDE_DEVICE, KCACHE_KIND_ANY, &none) ==
        KCACHE_INVALID_ARGUMENT);
  CHECK(strstr(kcache_last_error(), "not a key") != NULL);
  job.opt_level = 9;
  CHECK(kcache_fetch_or_compile(client, module, size, &job, "sm_90", &none) == KCACHE_INVALID_ARGUMENT);
  CHECK(none == NULL);

  /* Relocatable device code: a second module linked in is part of the key and of the image. */
  static const char helper[] =
      "target triple = \"nvptx64-nvidia-cuda\"\n"
      "define ptx_kernel void @linked_kernel(ptr %p) {\n  store i32 7, ptr %p\n  ret void\n}\n";
  kcache_module linked = {helper, sizeof helper - 1, KCACHE_FORMAT_TEXT};
  kcache_job rdc;
  kcache_job_init(&rdc);
  rdc.linked_modules = &linked;
  rdc.linked_module_count = 1;
  char rdc_key[65];
  CHECK(kcache_compute_key(client, module, size, &rdc, rdc_key) == KCACHE_OK);
  CHECK(strcmp(rdc_key, key) != 0);
  kcache_image *rdc_image = NULL;
  CHECK(kcache_fetch_or_compile(client, module, size, &rdc, "sm_90", &rdc_image) == KCACHE_OK);
  CHECK(rdc_image != NULL && memmem(kcache_image_data(rdc_image), kcache_image_size(rdc_image), ".entry linked_kernel", 20) != NULL);
  kcache_image_free(rdc_image);

  /* A caller built against the first kcache_job (before linked_modules): nothing past its size is read. */
  kcache_job old;
  memset(&old, 0xAB, sizeof old);
  kcache_job_init_size(&old, offsetof(kcache_job, linked_modules));
  CHECK(old.struct_size == offsetof(kcache_job, linked_modules));
  char old_key[65];
  CHECK(kcache_compute_key(client, module, size, &old, old_key) == KCACHE_OK);
  CHECK(strcmp(old_key, key) == 0);
  kcache_job uninitialised;
  memset(&uninitialised, 0, sizeof uninitialised);
  CHECK(kcache_compute_key(client, module, size, &uninitialised, old_key) == KCACHE_INVALID_ARGUMENT);
  CHECK(strstr(kcache_last_error(), "kcache_job_init") != NULL);

  /* A job for an older driver (CUDA 12.4) gets PTX that driver JITs: ISA 8.4 at most. */
  kcache_job for_old_driver;
  kcache_job_init(&for_old_driver);
  CHECK(for_old_driver.driver_version == KCACHE_DRIVER_THIS_MACHINE);
  for_old_driver.driver_version = 12040;
  kcache_image *old_ptx = NULL;
  CHECK(kcache_fetch_or_compile(client, module, size, &for_old_driver, "sm_80", &old_ptx) == KCACHE_OK);
  if (old_ptx != NULL) {
    const char *text = (const char *)kcache_image_data(old_ptx);
    const char *version = memmem(text, kcache_image_size(old_ptx), ".version ", 9);
    int major = 0, minor = 0;
    CHECK(version != NULL && sscanf(version, ".version %d.%d", &major, &minor) == 2);
    CHECK(major * 10 + minor <= 84);
    kcache_image_free(old_ptx);
  }
  for_old_driver.driver_version = 12045;
  CHECK(kcache_compute_key(client, module, size, &for_old_driver, old_key) == KCACHE_INVALID_ARGUMENT);
  CHECK(strstr(kcache_last_error(), "12045") != NULL);
  for_old_driver.driver_version = -7;
  CHECK(kcache_compute_key(client, module, size, &for_old_driver, old_key) == KCACHE_INVALID_ARGUMENT);
  CHECK(strstr(kcache_last_error(), "KCACHE_DRIVER_NONE") != NULL);

  kcache_image_free(image);
  kcache_image_free(again);
  kcache_client_free(client);
  free(module);
  if (failures != 0) return 1;
  puts("capi ok");
  return 0;
}
