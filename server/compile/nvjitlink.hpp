// nvJitLink from the CUDA toolkit, opened with dlopen at run time (the toolkit is optional at
// build and run time): PTX -> cubin in process, without a ptxas process per image.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compile/dynamic_library.hpp"
#include "kcache/expected.hpp"

namespace kcache::server {

class NvJitLink {
 public:
  // Opens lib64/libnvJitLink.so under the toolkit; nullptr when absent or unusable.
  static std::shared_ptr<const NvJitLink> open(const std::filesystem::path& cuda_root);
  NvJitLink(const NvJitLink&) = delete;
  NvJitLink& operator=(const NvJitLink&) = delete;

  const std::string& version() const { return m_version; }  // "13.0"

  struct Result {
    std::string cubin;
    std::string info_log;  // with -verbose: registers, memory and spills per kernel
  };
  // Assembles the PTX modules (one, or several to link) for `arch` with nvJitLink `options`
  // (-O3, -g, -lineinfo, ...). Thread-safe: every call has its own handle. A failure carries
  // nvJitLink's error log verbatim. `libraries` (static device libraries such as
  // libcudadevrt.a) are linked in.
  Expected<Result> assemble(const std::vector<std::string_view>& ptx, const std::string& arch,
                            const std::vector<std::string>& options,
                            const std::vector<std::filesystem::path>& libraries, ErrorCode failure_code) const;

 private:
  NvJitLink() = default;
  struct Api;
  std::unique_ptr<DynamicLibrary> m_library;
  std::unique_ptr<Api> m_api;
  std::string m_version;
};

}  // namespace kcache::server
