#include "kcache/rtlib.hpp"

#include <algorithm>
#include <array>

#include "kcache/sha256.hpp"

namespace kcache::rtlib {
namespace {

constexpr std::array k_functions = {
#define KCACHE_RUNTIME_FUNCTION(name, signature, meaning) RuntimeFunction{#name, signature, meaning},
#include "manifest.def"
#undef KCACHE_RUNTIME_FUNCTION
};

}  // namespace
}  // namespace kcache::rtlib

extern const unsigned char kcache_rtlib_bitcode[];
extern const std::size_t kcache_rtlib_bitcode_size;
extern const unsigned char kcache_rtlib_amdgcn_bitcode[];
extern const std::size_t kcache_rtlib_amdgcn_bitcode_size;

namespace kcache::rtlib {

std::span<const RuntimeFunction> runtime_functions() { return k_functions; }

std::string_view device_bitcode() {
  return {reinterpret_cast<const char*>(kcache_rtlib_bitcode), kcache_rtlib_bitcode_size};
}

std::string_view amdgcn_bitcode() {
  return {reinterpret_cast<const char*>(kcache_rtlib_amdgcn_bitcode), kcache_rtlib_amdgcn_bitcode_size};
}

std::span<const std::string_view> amdgcn_missing() { return {}; }

std::span<const std::string_view> cxx_abi_functions() {
  static constexpr std::array<std::string_view, 2> k_names = {"__cxa_pure_virtual", "__cxa_deleted_virtual"};
  return k_names;
}

Provider provider_of(std::string_view name) {
  if (std::any_of(k_functions.begin(), k_functions.end(), [&](const RuntimeFunction& f) { return f.name == name; })) {
    return Provider::rtlib;
  }
  for (std::string_view abi : cxx_abi_functions()) {
    if (abi == name) return Provider::rtlib;
  }
  if (name.starts_with("__nv_")) return Provider::libdevice;
  if (name == "vprintf" || name == "malloc" || name == "free" || name == "__assertfail") return Provider::driver;
  if (name.starts_with("__cudaCDP2") || name.starts_with("cuda")) return Provider::device_runtime;
  return Provider::none;
}

const std::string& rtlib_digest() {
  static const std::string digest = [] {
    Sha256 h;
    for (const RuntimeFunction& f : k_functions) {
      for (std::string_view part : {f.name, f.signature, f.meaning}) {
        h.update(part);
        h.update(std::string_view("\0", 1));
      }
    }
    h.update(device_bitcode());
    h.update(std::string_view("\0", 1));
    h.update(amdgcn_bitcode());
    return to_hex(h.finish());
  }();
  return digest;
}

bool is_device_only_symbol(std::string_view name) {
  if (name.starts_with("gpu_") || name.starts_with("llvm.nvvm.") || name.starts_with("llvm.amdgcn.")) return true;
  if (name.starts_with("__ocml_") || name.starts_with("__ockl_") || name.starts_with("__oclc_")) return true;
  for (const RuntimeFunction& f : k_functions) {
    if (f.name == name) return true;
  }
  return false;
}

}  // namespace kcache::rtlib
