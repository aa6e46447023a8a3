// The runtime library's manifest as data, and what counts as a device-only symbol.
#pragma once

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

// Device functions the CUDA driver provides to every module; references to them may stay
// undefined in PTX.
bool is_driver_provided(std::string_view name);

// Hex SHA-256 over the manifest and the device bitcode: part of the toolchain fingerprint, so a
// change to rtlib changes every device key.
const std::string& rtlib_digest();

// A symbol that exists only on the device: an rtlib function, the reserved gpu_ prefix, or a
// target intrinsic (llvm.nvvm.*, llvm.amdgcn.*).
bool is_device_only_symbol(std::string_view name);

}  // namespace kcache::rtlib
