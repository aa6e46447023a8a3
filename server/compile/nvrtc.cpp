#include "compile/nvrtc.hpp"

#include <sstream>

namespace kcache::server {
namespace {

// NVRTC's C ABI, declared here so kcache builds without the toolkit's headers.
using ProgramHandle = struct _nvrtcProgram*;
using NvrtcStatus = int;  // nvrtcResult; 0 is NVRTC_SUCCESS

// The log's lines, for an error's details (the diagnostics a client sees).
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

}  // namespace

struct Nvrtc::Api {
  const char* (*error_string)(NvrtcStatus) = nullptr;
  NvrtcStatus (*version)(int*, int*) = nullptr;
  NvrtcStatus (*create)(ProgramHandle*, const char*, const char*, int, const char* const*,
                        const char* const*) = nullptr;
  NvrtcStatus (*destroy)(ProgramHandle*) = nullptr;
  NvrtcStatus (*compile)(ProgramHandle, int, const char* const*) = nullptr;
  NvrtcStatus (*ptx_size)(ProgramHandle, std::size_t*) = nullptr;
  NvrtcStatus (*ptx)(ProgramHandle, char*) = nullptr;
  NvrtcStatus (*cubin_size)(ProgramHandle, std::size_t*) = nullptr;
  NvrtcStatus (*cubin)(ProgramHandle, char*) = nullptr;
  NvrtcStatus (*ltoir_size)(ProgramHandle, std::size_t*) = nullptr;
  NvrtcStatus (*ltoir)(ProgramHandle, char*) = nullptr;
  NvrtcStatus (*log_size)(ProgramHandle, std::size_t*) = nullptr;
  NvrtcStatus (*log)(ProgramHandle, char*) = nullptr;
  NvrtcStatus (*add_name)(ProgramHandle, const char*) = nullptr;
  NvrtcStatus (*lowered_name)(ProgramHandle, const char*, const char**) = nullptr;
};

std::shared_ptr<const Nvrtc> Nvrtc::open(const std::filesystem::path& cuda_root) {
  std::shared_ptr<Nvrtc> self(new Nvrtc());
  self->m_library = std::make_unique<DynamicLibrary>(cuda_root / "lib64" / "libnvrtc.so");
  self->m_api = std::make_unique<Api>();
  Api& api = *self->m_api;
  auto bind = [&](auto& fn, const char* name) { self->m_library->bind(fn, name); };
  bind(api.error_string, "nvrtcGetErrorString");
  bind(api.version, "nvrtcVersion");
  bind(api.create, "nvrtcCreateProgram");
  bind(api.destroy, "nvrtcDestroyProgram");
  bind(api.compile, "nvrtcCompileProgram");
  bind(api.ptx_size, "nvrtcGetPTXSize");
  bind(api.ptx, "nvrtcGetPTX");
  bind(api.cubin_size, "nvrtcGetCUBINSize");
  bind(api.cubin, "nvrtcGetCUBIN");
  bind(api.ltoir_size, "nvrtcGetLTOIRSize");
  bind(api.ltoir, "nvrtcGetLTOIR");
  bind(api.log_size, "nvrtcGetProgramLogSize");
  bind(api.log, "nvrtcGetProgramLog");
  bind(api.add_name, "nvrtcAddNameExpression");
  bind(api.lowered_name, "nvrtcGetLoweredName");
  int major = 0, minor = 0;
  if (!self->m_library->complete() || api.version(&major, &minor) != 0) return nullptr;
  self->m_version = std::to_string(major) + "." + std::to_string(minor);
  return self;
}

Expected<Nvrtc::Output> Nvrtc::compile(const Program& program, ErrorCode failure_code) const {
  const Api& api = *m_api;
  std::string source(program.source);  // NUL-terminated, as NVRTC reads it
  std::string source_name(program.source_name);
  std::vector<std::string> header_bytes, header_names;
  for (const auto& [name, bytes] : program.headers) {
    header_names.emplace_back(name);
    header_bytes.emplace_back(bytes);
  }
  std::vector<const char*> names, bytes, options;
  for (std::size_t i = 0; i < header_names.size(); ++i) {
    names.push_back(header_names[i].c_str());
    bytes.push_back(header_bytes[i].c_str());
  }
  for (const std::string& o : program.options) options.push_back(o.c_str());

  ProgramHandle handle = nullptr;
  if (NvrtcStatus s = api.create(&handle, source.c_str(), source_name.c_str(), static_cast<int>(names.size()),
                                 bytes.data(), names.data());
      s != 0) {
    return make_error(ErrorCode::k_internal, std::string("nvrtcCreateProgram: ") + api.error_string(s));
  }
  struct Destroy {
    const Api& api;
    ProgramHandle& handle;
    ~Destroy() { api.destroy(&handle); }
  } destroy{api, handle};
  for (const std::string& expression : program.name_expressions) {
    if (NvrtcStatus s = api.add_name(handle, expression.c_str()); s != 0) {
      return make_error(ErrorCode::k_invalid_argument,
                        "NVRTC refused the name expression '" + expression + "': " + api.error_string(s));
    }
  }
  auto read = [&](auto size_fn, auto read_fn) {
    std::size_t size = 0;
    if (size_fn(handle, &size) != 0 || size == 0) return std::string();
    std::string text(size, '\0');
    if (read_fn(handle, text.data()) != 0) return std::string();
    return text;
  };
  NvrtcStatus compiled = api.compile(handle, static_cast<int>(options.size()), options.data());
  Output out;
  out.log = read(api.log_size, api.log);
  while (!out.log.empty() && (out.log.back() == '\0' || out.log.back() == '\n')) out.log.pop_back();
  if (compiled != 0) {
    return make_error(failure_code,
                      std::string("NVRTC could not compile ") + source_name + " (" + api.error_string(compiled) +
                          "):\n" + out.log,
                      lines_of(out.log));
  }
  out.ptx = read(api.ptx_size, api.ptx);
  while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();  // the size counts its NUL
  out.cubin = read(api.cubin_size, api.cubin);
  out.ltoir = read(api.ltoir_size, api.ltoir);
  for (const std::string& expression : program.name_expressions) {
    const char* lowered = nullptr;
    if (api.lowered_name(handle, expression.c_str(), &lowered) != 0 || lowered == nullptr) {
      return make_error(ErrorCode::k_invalid_argument,
                        "the name expression '" + expression + "' names nothing NVRTC instantiated: is it a __global__ "
                        "function or a __device__ variable of the source?");
    }
    out.lowered_names.emplace_back(expression, lowered);
  }
  return out;
}

}  // namespace kcache::server
