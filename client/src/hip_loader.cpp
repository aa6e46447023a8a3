#include "kcache/hip_loader.hpp"

#include <dlfcn.h>

#include <array>
#include <cstddef>
#include <cstring>
#include <type_traits>

#include "kcache/amd_target.hpp"
#include "kcache/exception_info.h"

namespace kcache {

// The HIP runtime entry points the loader uses, declared here (hipError_t and hipMemcpyKind are
// ints; handles and device pointers are pointers) so kcache builds without ROCm.
struct HipApi {
  int (*init)(unsigned) = nullptr;
  int (*get_device_count)(int*) = nullptr;
  int (*set_device)(int) = nullptr;
  int (*get_device_properties)(void*, int) = nullptr;
  int (*module_load_data)(void**, const void*) = nullptr;
  int (*module_unload)(void*) = nullptr;
  int (*module_get_function)(void**, void*, const char*) = nullptr;
  int (*module_get_global)(void**, std::size_t*, void*, const char*) = nullptr;
  int (*module_launch_kernel)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*,
                              void**, void**) = nullptr;
  int (*device_synchronize)() = nullptr;
  int (*malloc)(void**, std::size_t) = nullptr;
  int (*free)(void*) = nullptr;
  int (*memcpy)(void*, const void*, std::size_t, int) = nullptr;
  int (*host_malloc)(void**, std::size_t, unsigned) = nullptr;
  int (*host_free)(void*) = nullptr;
  int (*host_get_device_pointer)(void**, void*, unsigned) = nullptr;
  const char* (*get_error_string)(int) = nullptr;
  int (*runtime_get_version)(int*) = nullptr;
};

namespace {

// The unversioned name first (ROCm's development link), then the runtimes' sonames.
constexpr std::array<const char*, 3> k_runtime_names = {"libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"};
constexpr const char* k_install_hint =
    "install it (Debian: apt install libamdhip64-5; or ROCm), or fetch images here and load them where an AMD "
    "GPU is";

constexpr unsigned k_host_malloc_mapped = 0x2;  // hipHostMallocMapped
// hipHostMallocCoherent: fine-grained memory, so the device's system-scope release in
// gpu_signal_exception reaches the host without the cache writeback a finished kernel does.
constexpr unsigned k_host_malloc_coherent = 0x40000000;
constexpr int k_memcpy_host_to_device = 1, k_memcpy_device_to_host = 2;  // hipMemcpyKind
constexpr int k_error_not_found = 500;                                   // hipErrorNotFound

// hipDeviceProp_t as HIP 5 declares it (hip/hip_runtime_api.h of Debian's libamdhip64-dev 5.2.3),
// up to gcnArchName, the device's full target ID ("gfx90a:sramecc+:xnack-"; HIP fills it from
// the ISA's target ID). hipDeviceGetAttribute cannot give it: it returns ints, and
// hipDeviceAttributeGcnArchName is refused (hipErrorInvalidValue) in HIP 5 and gone in 6.
// HIP 6 changed hipDeviceProp_t but keeps this layout, unchanged, as hipDeviceProp_tR0000: what
// hipGetDevicePropertiesR0000 fills, and the plain exported hipGetDeviceProperties too (the
// headers map that name to R0600 for new builds; the symbol stays for HIP 5 binaries).
struct DevicePropR0000Head {
  char name[256];
  std::size_t total_global_mem, shared_mem_per_block;
  int regs_per_block, warp_size, max_threads_per_block, max_threads_dim[3], max_grid_size[3];
  int clock_rate, memory_clock_rate, memory_bus_width;
  std::size_t total_const_mem;
  int major, minor, multi_processor_count, l2_cache_size, max_threads_per_multi_processor, compute_mode;
  int clock_instruction_rate;
  unsigned arch;  // hipDeviceArch_t: 17 one-bit fields in one unsigned
  int concurrent_kernels, pci_domain_id, pci_bus_id, pci_device_id;
  std::size_t max_shared_memory_per_multi_processor;
  int is_multi_gpu_board, can_map_host_memory, gcn_arch;
  char gcn_arch_name[256];
};
// offsetof(hipDeviceProp_t, gcnArchName) and sizeof(hipDeviceProp_t), compiled against the 5.2.3
// header on x86-64 (LP64; aarch64 lays it out the same).
static_assert(offsetof(DevicePropR0000Head, gcn_arch_name) == 396);
constexpr std::size_t k_device_prop_r0000_size = 792;
// Room for any layout a runtime might write, so a wrong guess is refused below instead of
// overrunning the stack (R0600 is about 1.5 KiB).
constexpr std::size_t k_device_prop_room = 8192;
static_assert(k_device_prop_room >= k_device_prop_r0000_size);

// Checks that `image` is what hipModuleLoadData may be handed: an ELF64 for EM_AMDGPU whose
// header tables lie inside it (the runtime takes no length and trusts them).
}  // namespace

int hip_code_object_version(int hip_version) {
  // HIP_VERSION: major * 10,000,000 + minor * 100,000 + patch.
  if (hip_version < 60000000) return 4;  // ROCm 5 (Debian's HIP 5.2): version 4 is the newest it surely loads
  if (hip_version < 60200000) return 5;  // ROCm 6.0 and 6.1: no version 6 (the generic targets)
  return 0;
}

namespace {

Expected<void> check_hsaco(std::string_view image, int code_object_version) {
  constexpr std::size_t k_header = 64;
  constexpr unsigned k_em_amdgpu = 224;
  auto fail = [](const std::string& why) { return make_error(ErrorCode::k_invalid_argument, "not an hsaco: " + why); };
  if (image.size() < k_header || image.substr(0, 4) != "\177ELF") return fail("no ELF header");
  if (image[4] != 2 || image[5] != 1) return fail("not a 64-bit little-endian ELF");
  // EI_ABIVERSION: ELFABIVERSION_AMDGPU_HSA_V4 is 2, V5 is 3, V6 is 4.
  if (int version = static_cast<unsigned char>(image[8]) + 2; image[7] == 64 && code_object_version != 0 &&
                                                                version > code_object_version) {
    return make_error(ErrorCode::k_invalid_argument,
                      "the hsaco is code object version " + std::to_string(version) + ", and this HIP runtime loads up "
                      "to version " + std::to_string(code_object_version) +
                      ": fetch with amd_code_object_version = HipLoader::code_object_version() (it is in the key)");
  }
  auto u16 = [&](std::size_t at) {
    return static_cast<unsigned>(static_cast<unsigned char>(image[at])) |
           static_cast<unsigned>(static_cast<unsigned char>(image[at + 1])) << 8;
  };
  auto u64 = [&](std::size_t at) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < 8; ++i)
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(image[at + i])) << (8 * i);
    return v;
  };
  if (unsigned machine = u16(18); machine != k_em_amdgpu) {
    return fail("ELF machine " + std::to_string(machine) + ", not EM_AMDGPU (224)");
  }
  auto inside = [&](std::uint64_t offset, unsigned count, unsigned entry) {
    std::uint64_t bytes = static_cast<std::uint64_t>(count) * entry;
    return offset <= image.size() && bytes <= image.size() - offset;
  };
  if (!inside(u64(32), u16(56), u16(54))) return fail("program headers past the end");
  if (!inside(u64(40), u16(60), u16(58))) return fail("section headers past the end");
  return {};
}

}  // namespace

Error HipLoader::runtime_error(int result, const std::string& what) const {
  const char* text = m_api && m_api->get_error_string != nullptr ? m_api->get_error_string(result) : nullptr;
  return make_error(ErrorCode::k_internal, what + ": HIP error " + std::to_string(result) +
                                               (text != nullptr ? std::string(" (") + text + ")" : ""));
}

Expected<void> HipLoader::select_device() const {
  if (int r = m_api->set_device(m_device); r != 0) return runtime_error(r, "hipSetDevice");
  return {};
}

Expected<std::unique_ptr<HipLoader>> HipLoader::open(int ordinal) {
  // RTLD_NODELETE: the runtime starts threads and registers exit handlers, so it must never be
  // unmapped while the process runs.
  void* library = nullptr;
  std::string why;
  bool why_is_absence = true;
  for (const char* name : k_runtime_names) {
    library = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (library != nullptr) break;
    // Keep the first reason, unless a later one says a runtime exists but does not load (a
    // library it needs is missing, say): that is the one to fix.
    const char* error = dlerror();
    std::string reason = error != nullptr ? error : std::string(name) + ": not found";
    bool absent = reason.starts_with(std::string(name) + ": cannot open shared object file");
    if (why.empty() || (why_is_absence && !absent)) {
      why = reason;
      why_is_absence = absent;
    }
  }
  if (library == nullptr) {
    return make_error(ErrorCode::k_failed_precondition,
                      "no usable HIP runtime on this machine: cannot open libamdhip64.so (nor .so.6, .so.5): " + why +
                          "; " + k_install_hint);
  }
  std::unique_ptr<HipLoader> loader(new HipLoader());
  loader->m_library = library;
  loader->m_api = std::make_unique<HipApi>();
  HipApi& api = *loader->m_api;
  std::string missing;
  auto bind = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(library, name));
    if (fn == nullptr) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  bind(api.init, "hipInit");
  bind(api.get_device_count, "hipGetDeviceCount");
  bind(api.set_device, "hipSetDevice");
  // HIP 6 names the old layout explicitly; HIP 5 has only the plain name, with that layout.
  api.get_device_properties = reinterpret_cast<int (*)(void*, int)>(dlsym(library, "hipGetDevicePropertiesR0000"));
  if (api.get_device_properties == nullptr) bind(api.get_device_properties, "hipGetDeviceProperties");
  bind(api.module_load_data, "hipModuleLoadData");
  bind(api.module_unload, "hipModuleUnload");
  bind(api.module_get_function, "hipModuleGetFunction");
  bind(api.module_get_global, "hipModuleGetGlobal");
  bind(api.module_launch_kernel, "hipModuleLaunchKernel");
  bind(api.device_synchronize, "hipDeviceSynchronize");
  bind(api.malloc, "hipMalloc");
  bind(api.free, "hipFree");
  bind(api.memcpy, "hipMemcpy");
  bind(api.host_malloc, "hipHostMalloc");
  bind(api.host_free, "hipHostFree");
  bind(api.host_get_device_pointer, "hipHostGetDevicePointer");
  bind(api.get_error_string, "hipGetErrorString");
  bind(api.runtime_get_version, "hipRuntimeGetVersion");
  if (!missing.empty()) {
    return make_error(ErrorCode::k_failed_precondition,
                      "libamdhip64.so lacks " + missing + " (this loader binds the HIP 5 and 6 API)");
  }
  if (int r = api.init(0); r != 0) {
    return make_error(ErrorCode::k_failed_precondition,
                      "libamdhip64.so: " + loader->runtime_error(r, "hipInit").message +
                          " (a HIP runtime without a usable AMD GPU? ROCm needs the amdgpu driver and /dev/kfd)");
  }
  int count = 0;
  if (int r = api.get_device_count(&count); r != 0 || count <= 0) {
    return make_error(
        ErrorCode::k_failed_precondition,
        "libamdhip64.so finds no AMD GPU" +
            (r != 0 ? " (" + loader->runtime_error(r, "hipGetDeviceCount").message + ")" : std::string()) +
            "; fetch images here, load them where an AMD GPU is");
  }
  if (ordinal < 0 || ordinal >= count) {
    return make_error(ErrorCode::k_failed_precondition,
                      "no AMD GPU " + std::to_string(ordinal) + ": libamdhip64.so finds " + std::to_string(count));
  }
  loader->m_device = ordinal;
  if (auto selected = loader->select_device(); !selected) return selected.error();

  alignas(std::max_align_t) std::array<char, k_device_prop_room> props{};
  if (int r = api.get_device_properties(props.data(), ordinal); r != 0) {
    return loader->runtime_error(r, "hipGetDeviceProperties");
  }
  const char* name = props.data() + offsetof(DevicePropR0000Head, gcn_arch_name);
  std::size_t length = strnlen(name, sizeof(DevicePropR0000Head::gcn_arch_name));
  if (length == sizeof(DevicePropR0000Head::gcn_arch_name) || !is_amd_arch(std::string_view(name, length))) {
    return make_error(ErrorCode::k_failed_precondition,
                      "libamdhip64.so: no target ID where HIP 5 and 6 keep it (hipDeviceProp_tR0000.gcnArchName, byte "
                      "396): a runtime with a device-properties layout this loader does not know");
  }
  loader->m_arch.assign(name, length);
  int version = 0;
  if (int r = api.runtime_get_version(&version); r != 0) return loader->runtime_error(r, "hipRuntimeGetVersion");
  loader->m_code_object_version = hip_code_object_version(version);
  return loader;
}

HipLoader::~HipLoader() {
  if (m_api && !m_allocations.empty()) {  // allocations exist only once open() bound everything
    (void)select_device();
    for (std::uint64_t p : m_allocations) m_api->free(reinterpret_cast<void*>(static_cast<std::uintptr_t>(p)));
  }
  if (m_library != nullptr) dlclose(m_library);
}

Expected<std::unique_ptr<HipLoader::Module>> HipLoader::load(std::string_view image) {
  if (auto valid = check_hsaco(image, m_code_object_version); !valid) return valid.error();
  if (auto selected = select_device(); !selected) return selected.error();
  std::unique_ptr<Module> module(new Module(*this));
  if (int r = m_api->module_load_data(&module->m_module, image.data()); r != 0) {
    Error e = runtime_error(r, "hipModuleLoadData");
    e.code = ErrorCode::k_invalid_argument;
    e.message += " (an hsaco for another target than " + m_arch + "?)";
    return e;
  }
  // rtlib's record pointer: point it at host-mapped memory.
  void* pointer_global = nullptr;
  std::size_t pointer_size = 0;
  int r =
      m_api->module_get_global(&pointer_global, &pointer_size, module->m_module, KCACHE_EXCEPTION_INFO_POINTER_SYMBOL);
  if (r == k_error_not_found) return module;  // no rtlib exception reporting in this image
  if (r != 0) return runtime_error(r, "hipModuleGetGlobal");
  if (pointer_size != sizeof(void*)) {
    return make_error(ErrorCode::k_invalid_argument, std::string("the image's ") +
                                                         KCACHE_EXCEPTION_INFO_POINTER_SYMBOL + " is " +
                                                         std::to_string(pointer_size) + " bytes, not a pointer");
  }
  if (int a = m_api->host_malloc(&module->m_record, sizeof(kcache_exception_info),
                                 k_host_malloc_mapped | k_host_malloc_coherent);
      a != 0) {
    module->m_record = nullptr;
    return runtime_error(a, "hipHostMalloc");
  }
  std::memset(module->m_record, 0, sizeof(kcache_exception_info));
  void* device_view = nullptr;
  if (int g = m_api->host_get_device_pointer(&device_view, module->m_record, 0); g != 0) {
    return runtime_error(g, "hipHostGetDevicePointer");
  }
  if (int c = m_api->memcpy(pointer_global, &device_view, sizeof device_view, k_memcpy_host_to_device); c != 0) {
    return runtime_error(c, "hipMemcpy (exception record pointer)");
  }
  return module;
}

Expected<std::uint64_t> HipLoader::alloc(std::size_t bytes) {
  if (auto selected = select_device(); !selected) return selected.error();
  void* p = nullptr;
  if (int r = m_api->malloc(&p, bytes); r != 0) return runtime_error(r, "hipMalloc");
  auto address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
  m_allocations.push_back(address);
  return address;
}

Expected<void> HipLoader::copy_to_device(std::uint64_t device, const void* host, std::size_t bytes) {
  if (auto selected = select_device(); !selected) return selected.error();
  void* to = reinterpret_cast<void*>(static_cast<std::uintptr_t>(device));
  if (int r = m_api->memcpy(to, host, bytes, k_memcpy_host_to_device); r != 0) return runtime_error(r, "hipMemcpy");
  return {};
}

Expected<void> HipLoader::copy_to_host(void* host, std::uint64_t device, std::size_t bytes) {
  if (auto selected = select_device(); !selected) return selected.error();
  const void* from = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(device));
  if (int r = m_api->memcpy(host, from, bytes, k_memcpy_device_to_host); r != 0) return runtime_error(r, "hipMemcpy");
  return {};
}

HipLoader::Module::~Module() {
  if (m_module != nullptr) m_loader.m_api->module_unload(m_module);
  if (m_record != nullptr) m_loader.m_api->host_free(m_record);
}

Expected<void> HipLoader::Module::launch(const std::string& name, Dim3 grid, Dim3 block, std::vector<void*> args) {
  HipApi& api = *m_loader.m_api;
  if (auto selected = m_loader.select_device(); !selected) return selected.error();
  void* function = nullptr;
  if (int r = api.module_get_function(&function, m_module, name.c_str()); r != 0) {
    Error e = m_loader.runtime_error(r, "no kernel '" + name + "' in the image");
    e.code = ErrorCode::k_not_found;
    return e;
  }
  // No kernel of this module runs now (every launch is waited for), so clearing cannot race.
  if (m_record != nullptr) std::memset(m_record, 0, sizeof(kcache_exception_info));
  int r = api.module_launch_kernel(function, grid.x, grid.y, grid.z, block.x, block.y, block.z, 0, nullptr, args.data(),
                                   nullptr);
  if (r == 0) r = api.device_synchronize();
  if (auto raised = raised_exception(name, static_cast<const volatile kcache_exception_info*>(m_record))) {
    return *raised;
  }
  if (r != 0) return m_loader.runtime_error(r, "launching " + name);
  return {};
}

}  // namespace kcache
