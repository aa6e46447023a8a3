// Which symbols a device module may leave undefined, in one place, for IR and PTX alike.
//
// After rtlib and libdevice are linked, a reference may stay undefined only when something
// supplies it when the image is linked or loaded:
//   - dynamic shared memory: `extern __shared__ T s[]` is an external declaration in address
//     space 3, of any type and alignment, several per kernel; the driver sizes it at launch;
//   - texture, surface and sampler references (!nvvm.annotations), bound by the driver;
//   - the CUDA driver's functions (vprintf, malloc, free, __assertfail);
//   - libcudadevrt's (cuda*, __cudaCDP2*: dynamic parallelism, grid sync), linked with the cubin;
//   - symbols another module of the same job defines (PTX linked by nvJitLink);
//   - LLVM intrinsics, and __nvvm_reflect (answered by the NVVMReflect pass).
// Anything else is INVALID_ARGUMENT naming each symbol and its users.
#pragma once

#include <set>
#include <string>
#include <string_view>

#include "kcache/expected.hpp"

namespace llvm {
class Module;
}

namespace kcache::server {

// The symbols a PTX module defines (visible or weak functions, kernels and variables) and the
// functions it declares .extern.
struct PtxSymbols {
  std::set<std::string> defined;
  std::set<std::string> external;
};
PtxSymbols ptx_symbols(std::string_view ptx);

// Whether PTX calls into the CUDA device runtime (libcudadevrt must be linked with it).
bool ptx_uses_device_runtime(std::string_view ptx);

// The rule above, on a module after rtlib and libdevice are linked. `defined_elsewhere` are the
// symbols other modules of the job define. The error's message names the first symbols (under
// 1 KiB); its details list every symbol with all of its users.
Expected<void> check_undefined_symbols(const llvm::Module& m, const std::set<std::string>& defined_elsewhere);

}  // namespace kcache::server
