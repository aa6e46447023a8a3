// NVRTC from the CUDA toolkit, opened with dlopen at run time as nvJitLink is (the toolkit is
// optional at build and run time): CUDA C++ source -> PTX, cubin or LTO-IR in process. Only
// compile workers load it (ToolkitLibraries in toolchain.hpp says why the daemon does not).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compile/dynamic_library.hpp"
#include "kcache/expected.hpp"

namespace kcache::server {

class Nvrtc {
 public:
  // Opens lib64/libnvrtc.so under the toolkit; nullptr when absent or unusable.
  static std::shared_ptr<const Nvrtc> open(const std::filesystem::path& cuda_root);
  Nvrtc(const Nvrtc&) = delete;
  Nvrtc& operator=(const Nvrtc&) = delete;

  const std::string& version() const { return m_version; }  // "13.0"

  struct Program {
    std::string_view source;
    std::string_view source_name;                                     // for NVRTC's messages
    std::vector<std::pair<std::string_view, std::string_view>> headers;  // (include name, bytes)
    std::vector<std::string> options;                                 // complete: arch, include paths...
    std::vector<std::string> name_expressions;
  };
  struct Output {
    std::string ptx;    // empty unless compiled for a virtual or real arch
    std::string cubin;  // empty unless compiled for a real arch (-arch=sm_XX)
    std::string ltoir;  // empty unless compiled with -dlto
    std::string log;    // NVRTC's program log (warnings), verbatim
    std::vector<std::pair<std::string, std::string>> lowered_names;  // (expression, lowered)
  };
  // Compiles `program` once. Thread-safe: every call has its own nvrtcProgram. A failed compile
  // is `failure_code` with NVRTC's log as the message's tail and its lines as details.
  Expected<Output> compile(const Program& program, ErrorCode failure_code) const;

 private:
  Nvrtc() = default;
  struct Api;
  std::unique_ptr<DynamicLibrary> m_library;
  std::unique_ptr<Api> m_api;
  std::string m_version;
};

}  // namespace kcache::server
