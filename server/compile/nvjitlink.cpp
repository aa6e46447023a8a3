#include "compile/nvjitlink.hpp"

namespace kcache::server {
namespace {

// nvJitLink's C ABI, declared here so kcache builds without the toolkit's headers.
using LinkerHandle = struct nvJitLink*;
using LinkerStatus = int;           // nvJitLinkResult; 0 is NVJITLINK_SUCCESS
constexpr int k_input_ptx = 2;      // NVJITLINK_INPUT_PTX
constexpr int k_input_library = 6;  // NVJITLINK_INPUT_LIBRARY

}  // namespace

struct NvJitLink::Api {
  LinkerStatus (*create)(LinkerHandle*, std::uint32_t, const char**) = nullptr;
  LinkerStatus (*destroy)(LinkerHandle*) = nullptr;
  LinkerStatus (*add_data)(LinkerHandle, int, const void*, std::size_t, const char*) = nullptr;
  LinkerStatus (*add_file)(LinkerHandle, int, const char*) = nullptr;
  LinkerStatus (*complete)(LinkerHandle) = nullptr;
  LinkerStatus (*cubin_size)(LinkerHandle, std::size_t*) = nullptr;
  LinkerStatus (*cubin)(LinkerHandle, void*) = nullptr;
  LinkerStatus (*error_log_size)(LinkerHandle, std::size_t*) = nullptr;
  LinkerStatus (*error_log)(LinkerHandle, char*) = nullptr;
  LinkerStatus (*info_log_size)(LinkerHandle, std::size_t*) = nullptr;
  LinkerStatus (*info_log)(LinkerHandle, char*) = nullptr;
  LinkerStatus (*version)(unsigned*, unsigned*) = nullptr;
};

std::shared_ptr<const NvJitLink> NvJitLink::open(const std::filesystem::path& cuda_root) {
  std::shared_ptr<NvJitLink> self(new NvJitLink());
  self->m_library = std::make_unique<DynamicLibrary>(cuda_root / "lib64" / "libnvJitLink.so");
  self->m_api = std::make_unique<Api>();
  Api& api = *self->m_api;
  auto bind = [&](auto& fn, const char* name) { self->m_library->bind(fn, name); };
  bind(api.create, "nvJitLinkCreate");
  bind(api.destroy, "nvJitLinkDestroy");
  bind(api.add_data, "nvJitLinkAddData");
  bind(api.add_file, "nvJitLinkAddFile");
  bind(api.complete, "nvJitLinkComplete");
  bind(api.cubin_size, "nvJitLinkGetLinkedCubinSize");
  bind(api.cubin, "nvJitLinkGetLinkedCubin");
  bind(api.error_log_size, "nvJitLinkGetErrorLogSize");
  bind(api.error_log, "nvJitLinkGetErrorLog");
  bind(api.info_log_size, "nvJitLinkGetInfoLogSize");
  bind(api.info_log, "nvJitLinkGetInfoLog");
  bind(api.version, "nvJitLinkVersion");
  unsigned major = 0, minor = 0;
  if (!self->m_library->complete() || api.version(&major, &minor) != 0) return nullptr;
  self->m_version = std::to_string(major) + "." + std::to_string(minor);
  return self;
}

Expected<NvJitLink::Result> NvJitLink::assemble(const std::vector<std::string_view>& ptx, const std::string& arch,
                                                const std::vector<std::string>& options,
                                                const std::vector<std::filesystem::path>& libraries,
                                                ErrorCode failure_code) const {
  const Api& api = *m_api;
  std::vector<std::string> args = {"-arch=" + arch, "-verbose"};
  args.insert(args.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  LinkerHandle handle = nullptr;
  if (LinkerStatus s = api.create(&handle, static_cast<std::uint32_t>(argv.size()), argv.data()); s != 0) {
    return make_error(ErrorCode::k_internal, "nvJitLink refused the options for " + arch + " (status " +
                                                 std::to_string(s) + ")");
  }
  auto log = [&](auto size_fn, auto read_fn) {
    std::size_t size = 0;
    if (size_fn(handle, &size) != 0 || size == 0) return std::string();
    std::string text(size, '\0');
    read_fn(handle, text.data());
    while (!text.empty() && text.back() == '\0') text.pop_back();
    return text;
  };
  Result result;
  LinkerStatus s = 0;
  for (std::size_t i = 0; i < ptx.size() && s == 0; ++i) {
    std::string name = "module" + std::to_string(i) + ".ptx";
    s = api.add_data(handle, k_input_ptx, ptx[i].data(), ptx[i].size(), name.c_str());
  }
  for (const std::filesystem::path& library : libraries) {
    if (s == 0) s = api.add_file(handle, k_input_library, library.c_str());
  }
  if (s == 0) s = api.complete(handle);
  if (s != 0) {
    std::string errors = log(api.error_log_size, api.error_log);
    api.destroy(&handle);
    return make_error(failure_code, "nvJitLink rejected the PTX for " + arch + ":\n" + errors);
  }
  std::size_t size = 0;
  api.cubin_size(handle, &size);
  result.cubin.resize(size);
  api.cubin(handle, result.cubin.data());
  result.info_log = log(api.info_log_size, api.info_log);
  api.destroy(&handle);
  return result;
}

}  // namespace kcache::server
