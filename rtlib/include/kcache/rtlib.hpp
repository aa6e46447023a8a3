// The runtime library's manifest as data, and what counts as a device-only symbol.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kcache::rtlib {

struct RuntimeFunction {
  std::string_view name;
  std::string_view signature;  // LLVM function type, e.g. "void (i32, ptr, ptr, i32)"
  std::string_view meaning;
};

// Every function of rtlib/manifest.def, in manifest order.
std::span<const RuntimeFunction> runtime_functions();

// The device implementation: NVPTX bitcode compiled from device/rtlib.c at build time.
std::string_view device_bitcode();

// The AMDGPU implementation: amdgcn bitcode compiled from device/amdgcn.c at build time, for no
// particular gfx target. It calls the ROCm device libraries (ockl printf and heap), which the
// pipeline links after it.
std::string_view amdgcn_bitcode();

// Manifest functions that amdgcn_bitcode() does not define: the AMDGPU pipeline refuses a module
// that calls one, by name. Empty today.
std::span<const std::string_view> amdgcn_missing();

// Who supplies a device function that a module calls without defining it. The name half of the
// rule for legal undefined symbols; server/compile/device_symbols.cpp applies it with what only
// the IR shows (dynamic shared memory, texture references, intrinsics).
enum class Provider : std::uint8_t {
  none,            // nobody: the module must define it
  rtlib,           // kcache's runtime library (manifest.def, and the C++ ABI functions below): linked in
  libdevice,       // CUDA's libdevice (__nv_*): linked in
  driver,          // the CUDA driver, at load time: vprintf, malloc, free, __assertfail
  device_runtime,  // libcudadevrt (cuda*, __cudaCDP2*: dynamic parallelism, grid sync): linked with the cubin
};
Provider provider_of(std::string_view name);

// C++ ABI functions rtlib defines for the device: a call of a pure or deleted virtual function
// traps with a device exception naming it. Not device-only: the host has its own.
std::span<const std::string_view> cxx_abi_functions();

// Hex SHA-256 over the manifest and both device bitcodes: part of the toolchain fingerprint, so a
// change to rtlib changes every device key.
const std::string& rtlib_digest();

// A symbol that exists only on the device: an rtlib function, the reserved gpu_ prefix, a target
// intrinsic (llvm.nvvm.*, llvm.amdgcn.*), or a ROCm device library name (__ocml_* math, __ockl_*
// kernel library, __oclc_* control constants).
bool is_device_only_symbol(std::string_view name);

}  // namespace kcache::rtlib
