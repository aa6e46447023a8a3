// kcache::HipLoader: loads fetched hsaco images onto an AMD GPU and turns rtlib's device
// exceptions into host errors, as kcache::Loader does for CUDA. The HIP runtime (libamdhip64.so,
// Debian's libamdhip64-5 or ROCm's) is opened with dlopen at run time, so everything builds, and
// runs, on machines without one: there open() says so.
//
// One difference from CUDA: ROCm's runtime ends the process (abort()) when a kernel traps, so a
// device exception comes back as an error only from a kernel that returns after
// gpu_signal_exception; one that traps afterwards takes the process with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/expected.hpp"
#include "kcache/loader.hpp"

namespace kcache {

struct HipApi;

// HipLoader::code_object_version for a HIP runtime of version `hip_version`, as
// hipRuntimeGetVersion reports it (50223144 for 5.2.3).
int hip_code_object_version(int hip_version);

class HipLoader {
 public:
  // Opens the runtime (libamdhip64.so, else .so.6, else .so.5) and picks AMD GPU `ordinal`.
  // FAILED_PRECONDITION, naming libamdhip64.so and what to install, where there is no runtime or
  // no such GPU.
  static Expected<std::unique_ptr<HipLoader>> open(int ordinal = 0);
  ~HipLoader();
  HipLoader(const HipLoader&) = delete;
  HipLoader& operator=(const HipLoader&) = delete;

  // The device's full target ID, e.g. "gfx90a:sramecc+:xnack-": what to fetch for.
  const std::string& arch() const { return m_arch; }
  // The newest HSA code object version this runtime loads, for
  // CompileRequest.amd_code_object_version: 4 under ROCm 5 (Debian's HIP 5.2), 5 under ROCm 6.0
  // and 6.1; 0 (anything LLVM writes) from ROCm 6.2.
  int code_object_version() const { return m_code_object_version; }

  class Module;
  using Dim3 = Loader::Dim3;

  // Loads an hsaco (hipModuleLoadData); one the device cannot run is INVALID_ARGUMENT. If the
  // image carries rtlib's exception record, its reports are redirected to host-mapped memory.
  Expected<std::unique_ptr<Module>> load(std::string_view image);

  // Device memory, freed with the HipLoader.
  Expected<std::uint64_t> alloc(std::size_t bytes);
  Expected<void> copy_to_device(std::uint64_t device, const void* host, std::size_t bytes);
  Expected<void> copy_to_host(void* host, std::uint64_t device, std::size_t bytes);

 private:
  HipLoader() = default;
  Error runtime_error(int result, const std::string& what) const;
  // HIP's current device belongs to the calling thread: every call selects this loader's.
  Expected<void> select_device() const;

  void* m_library = nullptr;
  std::unique_ptr<HipApi> m_api;
  int m_device = 0;
  std::string m_arch;
  int m_code_object_version = 0;
  std::vector<std::uint64_t> m_allocations;
  friend class Module;
};

class HipLoader::Module {
 public:
  ~Module();
  // Launches kernel `name` on the null stream and waits for the device. `args` point at each
  // kernel parameter's value. A device exception reported through rtlib is ABORTED with the
  // kernel, thread, block and message (the record is cleared before each launch, since the
  // module stays usable); any other failure carries HIP's error.
  Expected<void> launch(const std::string& name, Dim3 grid, Dim3 block, std::vector<void*> args);

 private:
  friend class HipLoader;
  explicit Module(HipLoader& loader) : m_loader(loader) {}

  HipLoader& m_loader;
  void* m_module = nullptr;
  void* m_record = nullptr;  // host-mapped exception record, or null when the image has none
};

}  // namespace kcache
