// The host guard: finds every way a host module reaches a device-only symbol (an rtlib
// function, the reserved gpu_ prefix, an NVVM/AMDGPU intrinsic, a ROCm device library name) or
// device memory (a GPU address space), and either explains them (policy reject) or replaces them
// with host stubs that fail loudly (policy stub).
#pragma once

#include <llvm/IR/Module.h>

#include <string>
#include <vector>

#include "kcache/expected.hpp"

namespace kcache::server {

// The weak host function every stub calls with the name of what was called; the default prints
// "device-only function NAME called on the host" to stderr and aborts. A program overrides it
// by defining its own (for example to throw, as CUDA.jl's CPU versions do).
inline constexpr const char* k_device_only_hook = "kcache_device_only_called";

struct GuardFinding {
  std::string symbol;
  std::string what;                // "rtlib function", "NVVM intrinsic", ...
  std::vector<std::string> users;  // "function 'f'", "global 'table'", "alias 'a'", "llvm.used"
  unsigned address_space = 0;      // the GPU address space, when found by one rather than by name
};

// Every device-only symbol the module names, with what refers to it; empty when clean.
std::vector<GuardFinding> find_device_only(const llvm::Module& m);

// The reject policy's error: each symbol and each user, and what to do about it.
Error guard_rejection(const std::vector<GuardFinding>& findings);

// The stub policy: redirects every device-only function reference to a host stub, and replaces
// the body of each host function that uses an intrinsic or GPU memory with a stub of itself.
// Returns what was stubbed; fails for what cannot be stubbed (device-only data, anything that
// lives in a GPU address space).
Expected<std::vector<std::string>> stub_device_only(llvm::Module& m, const std::vector<GuardFinding>& findings);

}  // namespace kcache::server
