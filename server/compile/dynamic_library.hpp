// A CUDA toolkit library opened with dlopen at run time (the toolkit is optional at build and
// run time), and its C entry points bound by name: what nvJitLink and NVRTC share.
#pragma once

#include <dlfcn.h>

#include <filesystem>

namespace kcache::server {

class DynamicLibrary {
 public:
  // RTLD_NODELETE: the library stays mapped after dlclose. The toolkit's libraries carry their own
  // static C++ runtime, whose allocations would otherwise outlive their code (and read as leaks
  // to LeakSanitizer).
  explicit DynamicLibrary(const std::filesystem::path& path)
      : m_handle(dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE)) {}
  ~DynamicLibrary() {
    if (m_handle != nullptr) dlclose(m_handle);
  }
  DynamicLibrary(const DynamicLibrary&) = delete;
  DynamicLibrary& operator=(const DynamicLibrary&) = delete;

  // Points `fn` at the entry point `name` (null when absent; complete() then says false).
  template <typename Fn>
  void bind(Fn*& fn, const char* name) {
    fn = m_handle != nullptr ? reinterpret_cast<Fn*>(dlsym(m_handle, name)) : nullptr;
    m_complete = m_complete && fn != nullptr;
  }
  // Whether the library opened and every bind found its entry point.
  bool complete() const { return m_handle != nullptr && m_complete; }

 private:
  void* m_handle;
  bool m_complete = true;
};

}  // namespace kcache::server
