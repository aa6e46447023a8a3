// kcache::Loader: loads fetched images into a CUDA context and turns rtlib's device exceptions
// into host errors. The driver (libcuda.so.1) is opened with dlopen at run time, so everything
// builds, and runs, on machines without one: there open() says so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/driver.hpp"
#include "kcache/expected.hpp"

struct kcache_exception_info;  // rtlib's device exception record (kcache/exception_info.h)

namespace kcache {

struct DriverApi;

// The CUDA version this machine's driver implements (cuDriverGetVersion: 12040 for 12.4), read
// once; 0 where there is no driver (libcuda.so.1 does not open). What a client states in
// CompileRequest.driver_version and FetchRequest.driver_version so it gets images it can load.
CudaVersion installed_driver_version();

// What a launch of `kernel` ends with when rtlib's exception record `record` (host-mapped, so it
// is read through volatile) says a thread raised an exception: ABORTED naming the kernel, the
// thread, the block, the exception and its message. Nothing where `record` is null or says no
// exception was raised. One wording for every loader (Loader, HipLoader).
std::optional<Error> raised_exception(const std::string& kernel, const volatile kcache_exception_info* record);

class Loader {
 public:
  // Opens the driver and makes device `ordinal`'s primary context current on this thread.
  // FAILED_PRECONDITION, naming libcuda.so.1, where there is no driver or no device.
  static Expected<std::unique_ptr<Loader>> open(int ordinal = 0);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The device's arch, e.g. "sm_90": what to fetch for.
  const std::string& arch() const { return m_arch; }
  // The driver's CUDA version (12040 for 12.4): what to compile and fetch for.
  CudaVersion driver_version() const { return m_driver_version; }

  class Module;

  // Loads a cubin or PTX image (cuModuleLoadDataEx); a PTX JIT failure comes back with the
  // driver's own error log. If the image carries rtlib's exception record, its reports are
  // redirected to host-mapped memory, readable even after a trap.
  Expected<std::unique_ptr<Module>> load(std::string_view image);

  struct Dim3 {
    unsigned x = 1, y = 1, z = 1;
  };

  // Device memory, freed with the Loader.
  Expected<std::uint64_t> alloc(std::size_t bytes);
  Expected<void> copy_to_device(std::uint64_t device, const void* host, std::size_t bytes);
  Expected<void> copy_to_host(void* host, std::uint64_t device, std::size_t bytes);

 private:
  Loader() = default;
  Error driver_error(int result, const std::string& what) const;

  void* m_library = nullptr;
  std::unique_ptr<DriverApi> m_api;
  void* m_context = nullptr;
  std::string m_arch;
  CudaVersion m_driver_version = 0;
  std::vector<std::uint64_t> m_allocations;
  friend class Module;
};

class Loader::Module {
 public:
  ~Module();
  // Launches kernel `name` and waits for it. `args` point at each kernel parameter's value. A
  // device exception reported through rtlib is ABORTED with the kernel, thread, block and
  // message; any other launch failure carries the driver's error.
  Expected<void> launch(const std::string& name, Dim3 grid, Dim3 block, std::vector<void*> args);

 private:
  friend class Loader;
  explicit Module(Loader& loader) : m_loader(loader) {}
  Expected<void> check_exception(const std::string& kernel, int launch_result);

  Loader& m_loader;
  void* m_module = nullptr;
  void* m_record = nullptr;  // host-mapped exception record, or null when the image has none
};

}  // namespace kcache
