// The AMD assembler step: ld.lld links the object LLVM's AMDGPU backend emits into an HSA code
// object (a shared ELF, e_machine EM_AMDGPU), and the code object's metadata note gives each
// kernel's resources.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "compile/toolchain.hpp"
#include "image.hpp"
#include "kcache/expected.hpp"

namespace kcache::server {

// Links `object` (a relocatable AMDGPU ELF) into a code object with ld.lld as a child process,
// stopped at `deadline`.
Expected<std::string> link_hsaco(const Toolchain& toolchain, std::string_view object, const std::string& target,
                                 std::chrono::steady_clock::time_point deadline);

// The kernels a code object's amdhsa metadata note lists (NT_AMDGPU_METADATA, MessagePack):
// name, VGPRs (KernelInfo::registers), SGPRs, LDS (shared_bytes) and scratch (local_bytes) per
// work-item; AMD's spill counts are registers, not ptxas's bytes, and are left out. INTERNAL when the bytes are not an AMDGPU ELF or the note does not parse.
Expected<std::vector<KernelInfo>> hsaco_kernels(std::string_view hsaco);

}  // namespace kcache::server
