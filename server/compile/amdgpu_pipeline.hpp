// AMD pipeline: LLVM IR -> HSA code object (hsaco) per AMD target ID. Parse, verify and link the
// job's modules; check rtlib references against the manifest; link rtlib's AMDGPU build, then
// ROCm's device libraries (ocml, ockl) where used; internalize; then per target: the oclc
// control constants from the target ID and options, AMDGPU codegen in process, and ld.lld into
// a code object whose metadata note gives each kernel's resources.
#pragma once

#include "compile/compiler.hpp"

namespace kcache::server {

Expected<CompileOutput> compile_amdgpu(const Toolchain& toolchain, const CompileJob& job);

}  // namespace kcache::server
