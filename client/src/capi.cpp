// The C API (kcache.h) over the C++ client. Nothing C++ crosses the boundary: every entry point
// catches, and errors become a status plus a per-thread message.
#include "kcache/kcache.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "endpoint.hpp"
#include "kcache/amd_target.hpp"
#include "kcache/bundle.hpp"
#include "kcache/client.hpp"
#include "kcache/client_job.hpp"
#include "kcache/job.hpp"
#include "kcache/loader.hpp"
#include "kcache/source_headers.hpp"
#include "wire/wire.hpp"

struct kcache_client {
  std::unique_ptr<kcache::Client> client;
};

struct kcache_image {
  kcache::FetchedImage fetched;
};

struct kcache_bundle {
  kcache::Bundle bundle;
};

struct kcache_result {
  std::string key;
  bool hit = false;
  std::vector<kcache_image> images;
};

namespace {

thread_local std::string t_last_error;

kcache_status fail(kcache_status code, std::string message) {
  t_last_error = std::move(message);
  return code;
}

kcache_status fail(const kcache::Error& e) { return fail(static_cast<int>(e.code), e.message); }

kcache_status ok() {
  t_last_error.clear();
  return KCACHE_OK;
}

// Runs `body`, turning any exception into KCACHE_INTERNAL.
template <typename Body>
kcache_status guarded(Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return fail(KCACHE_INTERNAL, std::string("libkcache: ") + e.what());
  } catch (...) {
    return fail(KCACHE_INTERNAL, "libkcache: unexpected failure");
  }
}

// Whether the caller's job struct (struct_size bytes) holds `member`.
#define KCACHE_JOB_HAS(job, member) \
  ((job)->struct_size >= offsetof(kcache_job, member) + sizeof(((kcache_job*)nullptr)->member))

constexpr std::size_t k_first_job_size = offsetof(kcache_job, linked_modules);  // the struct before it grew

// A count and its array: an array is NULL only when the count is 0.
template <typename T>
kcache::Expected<void> check_array(const T* items, std::size_t count, const char* name) {
  if (items == nullptr && count > 0) {
    return kcache::make_error(kcache::ErrorCode::k_invalid_argument,
                              std::string("job.") + name + " is NULL but its count is not 0");
  }
  return {};
}

// The format of module bytes as a kcache_job states it (the daemon's own inference for
// KCACHE_FORMAT_INFER); INVALID_ARGUMENT naming `what` for a number that is no kcache_format.
kcache::Expected<kcache::InputFormat> module_format(int format, std::string_view bytes, const std::string& what) {
  using namespace kcache;
  switch (format) {
    case KCACHE_FORMAT_INFER: return infer_format(bytes);
    case KCACHE_FORMAT_BITCODE: return InputFormat::llvm_bitcode;
    case KCACHE_FORMAT_TEXT: return InputFormat::llvm_text;
    case KCACHE_FORMAT_PTX: return InputFormat::ptx;
    case KCACHE_FORMAT_CUDA: return InputFormat::cuda_cpp;
    default:
      return make_error(ErrorCode::k_invalid_argument, what + " " + std::to_string(format) + " is not a kcache_format");
  }
}

// A job as the C API's caller gave it: it borrows the caller's bytes and the headers found
// through job.include_dirs, which are read here and kept beside it.
struct CallerJob {
  kcache::ClientJob job;
  std::vector<kcache::CollectedHeader> found;
};

// A CUDA C++ job's headers, NVRTC options and name expressions, and the headers found through
// job.include_dirs.
kcache::Expected<void> add_source(const kcache_job* job, CallerJob& out) {
  using namespace kcache;
  if (!KCACHE_JOB_HAS(job, name_expression_count)) return {};
  for (auto ok : {check_array(job->headers, job->header_count, "headers"),
                  check_array(job->include_dirs, job->include_dir_count, "include_dirs"),
                  check_array(job->nvrtc_options, job->nvrtc_option_count, "nvrtc_options"),
                  check_array(job->name_expressions, job->name_expression_count, "name_expressions")}) {
    if (!ok) return ok.error();
  }
  std::set<std::string_view> named;
  for (std::size_t i = 0; i < job->header_count; ++i) {
    const kcache_header& h = job->headers[i];
    if (h.name == nullptr || (h.data == nullptr && h.size > 0)) {
      return make_error(ErrorCode::k_invalid_argument, "job.headers[" + std::to_string(i) + "] has a NULL name or data");
    }
    out.job.headers.emplace_back(h.name, std::string_view(static_cast<const char*>(h.data), h.size));
    named.insert(h.name);
  }
  if (job->include_dir_count > 0) {
    std::vector<std::filesystem::path> dirs;
    for (std::size_t i = 0; i < job->include_dir_count; ++i) dirs.emplace_back(job->include_dirs[i]);
    // The source has no folder of its own here: its "quoted" includes are looked for in include_dirs.
    auto found = collect_headers(out.job.modules.front(), {}, dirs);
    if (!found) return found.error();
    out.found = std::move(*found);
    for (const CollectedHeader& h : out.found) {
      if (!named.contains(h.name)) out.job.headers.emplace_back(h.name, h.bytes);  // the caller's own of that name wins
    }
  }
  SourceJob& source = out.job.spec.source;
  source.nvrtc_options.assign(job->nvrtc_options, job->nvrtc_options + job->nvrtc_option_count);
  source.name_expressions.assign(job->name_expressions, job->name_expressions + job->name_expression_count);
  return {};
}

// The job a kcache_job describes, as the CLI's jobs are (kcache/client_job.hpp), into `out`.
// `device_arch`: the device fetch_or_compile fetches for, which joins the job's archs.
kcache::Expected<void> read_job(const void* module, std::size_t size, const kcache_job* job, const char* device_arch,
                                CallerJob& out) {
  using namespace kcache;
  if (module == nullptr && size > 0) return make_error(ErrorCode::k_invalid_argument, "module is NULL but size is not 0");
  if (job == nullptr) return make_error(ErrorCode::k_invalid_argument, "job is NULL: call kcache_job_init");
  if (job->struct_size < k_first_job_size) {
    return make_error(ErrorCode::k_invalid_argument, "job.struct_size is " + std::to_string(job->struct_size) +
                                                         ": call kcache_job_init (or kcache_job_init_size) first");
  }
  ClientJob& c = out.job;
  JobSpec& spec = c.spec;
  c.modules.emplace_back(static_cast<const char*>(module), size);
  spec.side = job->side == KCACHE_SIDE_HOST ? Side::host : Side::device;
  auto format = module_format(job->format, c.modules.front(), "job.format");
  if (!format) return format.error();
  spec.format = *format;
  if (job->target != nullptr) spec.target = job->target;
  if (job->opt_level < 0) return make_error(ErrorCode::k_invalid_argument, "job.opt_level is negative");
  spec.options.opt_level = static_cast<std::uint32_t>(job->opt_level);
  spec.options.debug_info = job->debug_info != 0;
  spec.options.lineinfo = job->lineinfo != 0;
  spec.options.fast_math = job->fast_math != 0;
  spec.options.entry_points.assign(job->entry_points, job->entry_points + job->entry_point_count);
  if (job->cpu != nullptr) spec.options.cpu = job->cpu;
  spec.options.guard = job->host_stubs != 0 ? HostGuard::stub : HostGuard::reject;
  c.archs.assign(job->archs, job->archs + job->arch_count);
  for (std::size_t i = 0; i < job->kind_count; ++i) {
    auto kind = wire::from_proto(static_cast<v1::ImageKind>(job->kinds[i]));
    if (!kind) {
      return make_error(ErrorCode::k_invalid_argument, "job.kinds[" + std::to_string(i) + "] is " +
                                                           std::to_string(job->kinds[i]) +
                                                           ", not the kcache_kind of an image (KCACHE_KIND_PTX to "
                                                           "KCACHE_KIND_AMDGCN)");
    }
    c.kinds.push_back(*kind);
  }
  if (KCACHE_JOB_HAS(job, linked_module_count) && job->linked_module_count > 0) {
    if (job->linked_modules == nullptr) {
      return make_error(ErrorCode::k_invalid_argument, "job.linked_modules is NULL but linked_module_count is not 0");
    }
    for (std::size_t i = 0; i < job->linked_module_count; ++i) {
      const kcache_module& m = job->linked_modules[i];
      std::string what = "job.linked_modules[" + std::to_string(i) + "]";
      if (m.data == nullptr && m.size > 0) return make_error(ErrorCode::k_invalid_argument, what + " has NULL data");
      c.modules.emplace_back(static_cast<const char*>(m.data), m.size);
      auto linked = module_format(m.format, c.modules.back(), what + ".format");
      if (!linked) return linked.error();
      spec.linked_formats.push_back(*linked);
    }
  }
  if (KCACHE_JOB_HAS(job, driver_version)) {
    if (job->driver_version < KCACHE_DRIVER_NONE) {
      return make_error(ErrorCode::k_invalid_argument,
                        "job.driver_version is " + std::to_string(job->driver_version) +
                            ": give cuDriverGetVersion's number, KCACHE_DRIVER_THIS_MACHINE or KCACHE_DRIVER_NONE");
    }
    if (job->driver_version > 0) {
      if (auto ok = check_cuda_version(static_cast<std::uint64_t>(job->driver_version)); !ok) return ok.error();
      c.driver = static_cast<CudaVersion>(job->driver_version);
    } else if (job->driver_version == KCACHE_DRIVER_THIS_MACHINE) {
      c.driver = installed_driver_version();
    }
  } else {
    c.driver = installed_driver_version();  // a caller from before the field: this machine's
  }
  // This machine's CUDA driver says nothing about an AMD job's images, nor NVRTC's output, which
  // is for its own toolkit: there only a driver the caller stated is kept (and refused, for AMD).
  bool stated = KCACHE_JOB_HAS(job, driver_version) && job->driver_version > 0;
  std::vector<std::string> archs = c.archs;
  if (device_arch != nullptr) archs.emplace_back(device_arch);
  std::string target = spec.target.empty() ? implied_device_target(archs) : spec.target;
  if (!stated && (target == k_amd_device_triple || spec.is_source())) c.driver = 0;
  if (KCACHE_JOB_HAS(job, amd_code_object_version) && job->amd_code_object_version != 0) {
    if (job->amd_code_object_version < 0 || job->amd_code_object_version > 255) {
      return make_error(ErrorCode::k_invalid_argument, "job.amd_code_object_version is " +
                                                           std::to_string(job->amd_code_object_version) +
                                                           ": give a code object version (4 to 6), or 0 for the daemon's");
    }
    spec.amd_code_object_cap = job->amd_code_object_version;
  }
  return add_source(job, out);
}

// The Compile request a kcache_job describes.
kcache::Expected<kcache::v1::CompileRequest> to_request(const void* module, std::size_t size, const kcache_job* job,
                                                        const char* device_arch = nullptr) {
  CallerJob caller;
  if (auto ok = read_job(module, size, job, device_arch, caller); !ok) return ok.error();
  return kcache::compile_request(caller.job);
}

}  // namespace

extern "C" {

void kcache_job_init_size(kcache_job* job, size_t struct_size) {
  if (job == nullptr || struct_size < k_first_job_size) return;
  // Only what the caller's struct holds: an older caller's is shorter than this library's.
  kcache_job defaults;
  std::memset(&defaults, 0, sizeof defaults);
  defaults.struct_size = std::min(struct_size, sizeof defaults);
  defaults.side = KCACHE_SIDE_DEVICE;
  defaults.opt_level = 2;
  std::memcpy(job, &defaults, defaults.struct_size);
}

const char* kcache_last_error(void) { return t_last_error.c_str(); }

kcache_status kcache_connect(const char* server, double timeout_seconds, kcache_client** out) {
  return guarded([&] {
    if (out == nullptr) return fail(KCACHE_INVALID_ARGUMENT, "out is NULL");
    kcache::ClientOptions options;
    options.server = kcache::resolve_server(server == nullptr ? "" : server);
    if (timeout_seconds > 0) options.deadline = std::chrono::milliseconds(static_cast<long long>(timeout_seconds * 1000));
    *out = new kcache_client{std::make_unique<kcache::Client>(options)};
    return ok();
  });
}

void kcache_client_free(kcache_client* client) { delete client; }

kcache_status kcache_compute_key(kcache_client* client, const void* module, size_t module_size, const kcache_job* job,
                                 char key_hex[65]) {
  return guarded([&] {
    if (client == nullptr || key_hex == nullptr) return fail(KCACHE_INVALID_ARGUMENT, "client or key_hex is NULL");
    auto request = to_request(module, module_size, job);
    if (!request) return fail(request.error());
    auto key = client->client->compute_key(*request);
    if (!key) return fail(key.error());
    std::string hex = key->hex();
    std::memcpy(key_hex, hex.c_str(), hex.size() + 1);
    return ok();
  });
}

namespace {

// The driver a fetch selects for (KCACHE_DRIVER_THIS_MACHINE, KCACHE_DRIVER_NONE or
// cuDriverGetVersion's number), as a CudaVersion (0: none stated).
kcache::Expected<kcache::CudaVersion> fetch_driver(long driver_version) {
  if (driver_version < KCACHE_DRIVER_NONE) {
    return kcache::make_error(kcache::ErrorCode::k_invalid_argument,
                              "driver_version is " + std::to_string(driver_version) +
                                  ": give cuDriverGetVersion's number, KCACHE_DRIVER_THIS_MACHINE or KCACHE_DRIVER_NONE");
  }
  if (driver_version == KCACHE_DRIVER_NONE) return kcache::CudaVersion{0};
  if (driver_version == KCACHE_DRIVER_THIS_MACHINE) return kcache::installed_driver_version();
  if (auto ok = kcache::check_cuda_version(static_cast<std::uint64_t>(driver_version)); !ok) return ok.error();
  return static_cast<kcache::CudaVersion>(driver_version);
}

}  // namespace

kcache_status kcache_fetch(kcache_client* client, const char* key_hex, const char* arch, int side, int kind,
                           kcache_image** out) {
  return kcache_fetch_for_driver(client, key_hex, arch, side, kind, KCACHE_DRIVER_THIS_MACHINE, out);
}

kcache_status kcache_fetch_for_driver(kcache_client* client, const char* key_hex, const char* arch, int side, int kind,
                                      long driver_version, kcache_image** out) {
  return guarded([&] {
    if (client == nullptr || key_hex == nullptr || arch == nullptr || out == nullptr) {
      return fail(KCACHE_INVALID_ARGUMENT, "client, key_hex, arch and out must not be NULL");
    }
    auto driver = fetch_driver(driver_version);
    if (!driver) return fail(driver.error());
    kcache::v1::FetchRequest request;
    request.set_key(key_hex);
    request.set_arch(arch);
    request.set_side(side == KCACHE_SIDE_HOST ? kcache::v1::SIDE_HOST : kcache::v1::SIDE_DEVICE);
    request.set_kind(static_cast<kcache::v1::ImageKind>(kind));
    if (side != KCACHE_SIDE_HOST) request.set_driver_version(*driver);
    auto fetched = client->client->fetch(request);
    if (!fetched) return fail(fetched.error());
    *out = new kcache_image{std::move(*fetched)};
    return ok();
  });
}

kcache_status kcache_fetch_or_compile(kcache_client* client, const void* module, size_t module_size,
                                      const kcache_job* job, const char* device_arch, kcache_image** out) {
  return guarded([&] {
    if (client == nullptr || device_arch == nullptr || out == nullptr) {
      return fail(KCACHE_INVALID_ARGUMENT, "client, device_arch and out must not be NULL");
    }
    auto request = to_request(module, module_size, job, device_arch);
    if (!request) return fail(request.error());
    auto fetched = client->client->fetch_or_compile(*request, device_arch);
    if (!fetched) return fail(fetched.error());
    *out = new kcache_image{std::move(*fetched)};
    return ok();
  });
}

kcache_status kcache_compile(kcache_client* client, const void* module, size_t module_size, const kcache_job* job,
                             kcache_result** out) {
  return guarded([&] {
    if (client == nullptr || out == nullptr) return fail(KCACHE_INVALID_ARGUMENT, "client and out must not be NULL");
    auto request = to_request(module, module_size, job);
    if (!request) return fail(request.error());
    auto compiled = client->client->compile(*request);
    if (!compiled) return fail(compiled.error());
    auto result = std::make_unique<kcache_result>();
    result->key = compiled->key();
    result->hit = compiled->outcome() == kcache::v1::OUTCOME_HIT;
    for (kcache::v1::Image& image : *compiled->mutable_images()) {
      kcache::FetchedImage fetched;
      fetched.data = std::move(*image.mutable_data());
      image.clear_data();
      fetched.image = std::move(image);
      result->images.push_back(kcache_image{std::move(fetched)});
    }
    *out = result.release();
    return ok();
  });
}

const char* kcache_result_key(const kcache_result* result) { return result ? result->key.c_str() : ""; }
int kcache_result_hit(const kcache_result* result) { return result && result->hit ? 1 : 0; }
size_t kcache_result_image_count(const kcache_result* result) { return result ? result->images.size() : 0; }
const kcache_image* kcache_result_image(const kcache_result* result, size_t index) {
  return result && index < result->images.size() ? &result->images[index] : nullptr;
}
void kcache_result_free(kcache_result* result) { delete result; }

kcache_status kcache_bundle_open(const char* dir, kcache_bundle** out) {
  return guarded([&] {
    if (dir == nullptr || out == nullptr) return fail(KCACHE_INVALID_ARGUMENT, "dir and out must not be NULL");
    auto bundle = kcache::Bundle::open(dir);
    if (!bundle) return fail(bundle.error());
    *out = new kcache_bundle{std::move(*bundle)};
    return ok();
  });
}

kcache_status kcache_bundle_fetch(const kcache_bundle* bundle, const char* key_hex, const char* arch, int kind,
                                  kcache_image** out) {
  // Only what this machine's driver loads (none stated where it has no driver).
  return kcache_bundle_fetch_for_driver(bundle, key_hex, arch, kind, KCACHE_DRIVER_THIS_MACHINE, out);
}

kcache_status kcache_bundle_fetch_for_driver(const kcache_bundle* bundle, const char* key_hex, const char* arch,
                                             int kind, long driver_version, kcache_image** out) {
  return guarded([&] {
    if (bundle == nullptr || key_hex == nullptr || arch == nullptr || out == nullptr) {
      return fail(KCACHE_INVALID_ARGUMENT, "bundle, key_hex, arch and out must not be NULL");
    }
    auto driver = fetch_driver(driver_version);
    if (!driver) return fail(driver.error());
    std::optional<kcache::ImageKind> only;
    if (kind != KCACHE_KIND_ANY) only = kcache::wire::from_proto(static_cast<kcache::v1::ImageKind>(kind));
    auto found = bundle->bundle.fetch(key_hex, arch, only, *driver);
    if (!found) return fail(found.error());
    kcache::FetchedImage fetched;
    fetched.image.set_arch(found->image.id.arch);
    fetched.image.set_kind(kcache::wire::to_proto(found->image.id.kind));
    fetched.image.set_size(found->image.size);
    fetched.image.set_sha256(found->image.sha256);
    fetched.image.set_needs_jit(found->needs_jit);
    for (const auto& [expression, lowered] : found->image.lowered_names) {
      kcache::v1::LoweredName* n = fetched.image.add_lowered_names();
      n->set_expression(expression);
      n->set_lowered(lowered);
    }
    fetched.data = std::move(found->data);
    *out = new kcache_image{std::move(fetched)};
    return ok();
  });
}

void kcache_bundle_free(kcache_bundle* bundle) { delete bundle; }

// A NULL image (what a failed call leaves) reads as empty, so a caller that checks late does not crash.
const void* kcache_image_data(const kcache_image* image) { return image ? image->fetched.data.data() : nullptr; }
size_t kcache_image_size(const kcache_image* image) { return image ? image->fetched.data.size() : 0; }
const char* kcache_image_arch(const kcache_image* image) { return image ? image->fetched.image.arch().c_str() : ""; }
int kcache_image_kind(const kcache_image* image) { return image ? image->fetched.image.kind() : 0; }
int kcache_image_needs_jit(const kcache_image* image) { return image && image->fetched.image.needs_jit() ? 1 : 0; }
const char* kcache_image_sha256(const kcache_image* image) { return image ? image->fetched.image.sha256().c_str() : ""; }
size_t kcache_image_lowered_name_count(const kcache_image* image) {
  return image ? static_cast<size_t>(image->fetched.image.lowered_names_size()) : 0;
}
const char* kcache_image_name_expression(const kcache_image* image, size_t index) {
  if (index >= kcache_image_lowered_name_count(image)) return "";
  return image->fetched.image.lowered_names(static_cast<int>(index)).expression().c_str();
}
const char* kcache_image_lowered_name(const kcache_image* image, size_t index) {
  if (index >= kcache_image_lowered_name_count(image)) return "";
  return image->fetched.image.lowered_names(static_cast<int>(index)).lowered().c_str();
}
void kcache_image_free(kcache_image* image) { delete image; }

}  // extern "C"
