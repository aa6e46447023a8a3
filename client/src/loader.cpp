#include "kcache/loader.hpp"

#include <dlfcn.h>

#include <cstring>

#include "kcache/exception_info.h"

namespace kcache {

// The CUDA driver API entry points the loader uses, declared here (CUresult is an int; handles
// are pointers) so kcache builds without the toolkit.
struct DriverApi {
  int (*init)(unsigned) = nullptr;
  int (*device_get)(int*, int) = nullptr;
  int (*device_attribute)(int*, int, int) = nullptr;
  int (*primary_ctx_retain)(void**, int) = nullptr;
  int (*primary_ctx_release)(int) = nullptr;
  int (*ctx_set_current)(void*) = nullptr;
  int (*ctx_synchronize)() = nullptr;
  int (*module_load_data_ex)(void**, const void*, unsigned, int*, void**) = nullptr;
  int (*module_unload)(void*) = nullptr;
  int (*module_get_function)(void**, void*, const char*) = nullptr;
  int (*module_get_global)(std::uint64_t*, std::size_t*, void*, const char*) = nullptr;
  int (*mem_alloc)(std::uint64_t*, std::size_t) = nullptr;
  int (*mem_free)(std::uint64_t) = nullptr;
  int (*memcpy_htod)(std::uint64_t, const void*, std::size_t) = nullptr;
  int (*memcpy_dtoh)(void*, std::uint64_t, std::size_t) = nullptr;
  int (*mem_host_alloc)(void**, std::size_t, unsigned) = nullptr;
  int (*mem_free_host)(void*) = nullptr;
  int (*mem_host_get_device_pointer)(std::uint64_t*, void*, unsigned) = nullptr;
  int (*launch_kernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**,
                       void**) = nullptr;
  int (*get_error_string)(int, const char**) = nullptr;
  int (*driver_get_version)(int*) = nullptr;
  int device = 0;
};

namespace {

constexpr int k_cc_major = 75;  // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int k_cc_minor = 76;
constexpr int k_jit_info_log = 3, k_jit_info_log_size = 4, k_jit_error_log = 5, k_jit_error_log_size = 6;
constexpr unsigned k_host_alloc_devicemap = 0x02;
constexpr int k_error_not_found = 500;  // CUDA_ERROR_NOT_FOUND

}  // namespace

CudaVersion installed_driver_version() {
  static const CudaVersion version = [] {
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return CudaVersion{0};
    int value = 0;
    auto get = reinterpret_cast<int (*)(int*)>(dlsym(library, "cuDriverGetVersion"));
    if (get == nullptr || get(&value) != 0 || !check_cuda_version(static_cast<std::uint64_t>(value > 0 ? value : 0))) {
      value = 0;
    }
    dlclose(library);
    return static_cast<CudaVersion>(value > 0 ? value : 0);
  }();
  return version;
}

std::optional<Error> raised_exception(const std::string& kernel, const volatile kcache_exception_info* record) {
  if (record == nullptr || record->status == 0) return std::nullopt;
  // The device wrote both strings with their terminator; a record that lost it is still read
  // only within its arrays.
  auto text = [](const volatile char* chars, std::size_t size) {
    std::string out;
    for (std::size_t i = 0; i < size && chars[i] != '\0'; ++i) out += chars[i];
    return out;
  };
  std::string name = text(record->name, sizeof record->name);
  std::string message = text(record->message, sizeof record->message);
  return make_error(ErrorCode::k_aborted,
                    "kernel " + kernel + " raised " + (name.empty() ? "an exception" : name) + " on thread (" +
                        std::to_string(record->thread[0]) + ", " + std::to_string(record->thread[1]) + ", " +
                        std::to_string(record->thread[2]) + ") of block (" + std::to_string(record->block[0]) + ", " +
                        std::to_string(record->block[1]) + ", " + std::to_string(record->block[2]) +
                        "): " + (message.empty() ? "no message" : message));
}

Error Loader::driver_error(int result, const std::string& what) const {
  const char* text = nullptr;
  if (m_api && m_api->get_error_string != nullptr) m_api->get_error_string(result, &text);
  return make_error(ErrorCode::k_internal, what + ": CUDA error " + std::to_string(result) +
                                               (text != nullptr ? std::string(" (") + text + ")" : ""));
}

Expected<std::unique_ptr<Loader>> Loader::open(int ordinal) {
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    return make_error(ErrorCode::k_failed_precondition,
                      std::string("no CUDA driver on this machine: cannot open libcuda.so.1 (") +
                          (why != nullptr ? why : "not found") + "); fetch images here, load them where a GPU is");
  }
  std::unique_ptr<Loader> loader(new Loader());
  loader->m_library = library;
  loader->m_api = std::make_unique<DriverApi>();
  DriverApi& api = *loader->m_api;
  std::string missing;
  auto bind = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(library, name));
    if (fn == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  bind(api.init, "cuInit");
  bind(api.device_get, "cuDeviceGet");
  bind(api.device_attribute, "cuDeviceGetAttribute");
  bind(api.primary_ctx_retain, "cuDevicePrimaryCtxRetain");
  bind(api.primary_ctx_release, "cuDevicePrimaryCtxRelease_v2");
  bind(api.ctx_set_current, "cuCtxSetCurrent");
  bind(api.ctx_synchronize, "cuCtxSynchronize");
  bind(api.module_load_data_ex, "cuModuleLoadDataEx");
  bind(api.module_unload, "cuModuleUnload");
  bind(api.module_get_function, "cuModuleGetFunction");
  bind(api.module_get_global, "cuModuleGetGlobal_v2");
  bind(api.mem_alloc, "cuMemAlloc_v2");
  bind(api.mem_free, "cuMemFree_v2");
  bind(api.memcpy_htod, "cuMemcpyHtoD_v2");
  bind(api.memcpy_dtoh, "cuMemcpyDtoH_v2");
  bind(api.mem_host_alloc, "cuMemHostAlloc");
  bind(api.mem_free_host, "cuMemFreeHost");
  bind(api.mem_host_get_device_pointer, "cuMemHostGetDevicePointer_v2");
  bind(api.launch_kernel, "cuLaunchKernel");
  bind(api.get_error_string, "cuGetErrorString");
  bind(api.driver_get_version, "cuDriverGetVersion");
  if (!missing.empty()) {
    return make_error(ErrorCode::k_failed_precondition, "libcuda.so.1 lacks " + missing + ": the driver is too old");
  }
  if (int r = api.init(0); r != 0) {
    return make_error(ErrorCode::k_failed_precondition, loader->driver_error(r, "cuInit").message +
                                                            " (a driver without a usable GPU?)");
  }
  if (int r = api.device_get(&api.device, ordinal); r != 0) return loader->driver_error(r, "cuDeviceGet");
  int major = 0, minor = 0;
  api.device_attribute(&major, k_cc_major, api.device);
  api.device_attribute(&minor, k_cc_minor, api.device);
  loader->m_arch = "sm_" + std::to_string(major * 10 + minor);
  int driver = 0;
  if (api.driver_get_version(&driver) == 0 && driver > 0 && check_cuda_version(static_cast<std::uint64_t>(driver))) {
    loader->m_driver_version = static_cast<CudaVersion>(driver);
  }
  if (int r = api.primary_ctx_retain(&loader->m_context, api.device); r != 0) {
    return loader->driver_error(r, "cuDevicePrimaryCtxRetain");
  }
  if (int r = api.ctx_set_current(loader->m_context); r != 0) return loader->driver_error(r, "cuCtxSetCurrent");
  return loader;
}

Loader::~Loader() {
  if (m_api) {
    for (std::uint64_t p : m_allocations) m_api->mem_free(p);
    if (m_context != nullptr) m_api->primary_ctx_release(m_api->device);
  }
  if (m_library != nullptr) dlclose(m_library);
}

Expected<std::unique_ptr<Loader::Module>> Loader::load(std::string_view image) {
  // PTX is text the driver reads up to a NUL; a cubin carries its own length.
  std::string bytes(image);
  std::vector<char> error_log(16384, '\0'), info_log(16384, '\0');
  int options[] = {k_jit_error_log, k_jit_error_log_size, k_jit_info_log, k_jit_info_log_size};
  void* values[] = {error_log.data(), reinterpret_cast<void*>(error_log.size()), info_log.data(),
                    reinterpret_cast<void*>(info_log.size())};
  std::unique_ptr<Module> module(new Module(*this));
  if (int r = m_api->module_load_data_ex(&module->m_module, bytes.c_str(), 4, options, values); r != 0) {
    Error e = driver_error(r, "cuModuleLoadDataEx");
    e.code = ErrorCode::k_invalid_argument;
    if (error_log[0] != '\0') e.message += "\n" + std::string(error_log.data());
    return e;
  }
  // rtlib's record pointer: point it at host-mapped memory.
  std::uint64_t pointer_global = 0;
  std::size_t pointer_size = 0;
  int r = m_api->module_get_global(&pointer_global, &pointer_size, module->m_module, KCACHE_EXCEPTION_INFO_POINTER_SYMBOL);
  if (r == k_error_not_found) return module;  // no rtlib exception reporting in this image
  if (r != 0) return driver_error(r, "cuModuleGetGlobal");
  if (int a = m_api->mem_host_alloc(&module->m_record, sizeof(kcache_exception_info), k_host_alloc_devicemap); a != 0) {
    return driver_error(a, "cuMemHostAlloc");
  }
  std::memset(module->m_record, 0, sizeof(kcache_exception_info));
  std::uint64_t device_view = 0;
  if (int g = m_api->mem_host_get_device_pointer(&device_view, module->m_record, 0); g != 0) {
    return driver_error(g, "cuMemHostGetDevicePointer");
  }
  if (int c = m_api->memcpy_htod(pointer_global, &device_view, sizeof device_view); c != 0) {
    return driver_error(c, "cuMemcpyHtoD");
  }
  return module;
}

Expected<std::uint64_t> Loader::alloc(std::size_t bytes) {
  std::uint64_t p = 0;
  if (int r = m_api->mem_alloc(&p, bytes); r != 0) return driver_error(r, "cuMemAlloc");
  m_allocations.push_back(p);
  return p;
}

Expected<void> Loader::copy_to_device(std::uint64_t device, const void* host, std::size_t bytes) {
  if (int r = m_api->memcpy_htod(device, host, bytes); r != 0) return driver_error(r, "cuMemcpyHtoD");
  return {};
}

Expected<void> Loader::copy_to_host(void* host, std::uint64_t device, std::size_t bytes) {
  if (int r = m_api->memcpy_dtoh(host, device, bytes); r != 0) return driver_error(r, "cuMemcpyDtoH");
  return {};
}

Loader::Module::~Module() {
  if (m_module != nullptr) m_loader.m_api->module_unload(m_module);
  if (m_record != nullptr) m_loader.m_api->mem_free_host(m_record);
}

Expected<void> Loader::Module::launch(const std::string& name, Dim3 grid, Dim3 block, std::vector<void*> args) {
  DriverApi& api = *m_loader.m_api;
  void* function = nullptr;
  if (int r = api.module_get_function(&function, m_module, name.c_str()); r != 0) {
    Error e = m_loader.driver_error(r, "no kernel '" + name + "' in the image");
    e.code = ErrorCode::k_not_found;
    return e;
  }
  int r = api.launch_kernel(function, grid.x, grid.y, grid.z, block.x, block.y, block.z, 0, nullptr, args.data(),
                            nullptr);
  if (r == 0) r = api.ctx_synchronize();
  return check_exception(name, r);
}

Expected<void> Loader::Module::check_exception(const std::string& kernel, int launch_result) {
  if (auto raised = raised_exception(kernel, static_cast<const volatile kcache_exception_info*>(m_record))) {
    return *raised;
  }
  if (launch_result != 0) return m_loader.driver_error(launch_result, "launching " + kernel);
  return {};
}

}  // namespace kcache
