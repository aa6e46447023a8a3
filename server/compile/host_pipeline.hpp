// Host pipeline: LLVM IR -> a relocatable, position-independent ELF object for the host triple.
// rtlib is never linked here; the guard runs before any codegen.
#pragma once

#include "compile/compiler.hpp"

namespace kcache::server {

Expected<CompileOutput> compile_host(const Toolchain& toolchain, const CompileJob& job);

}  // namespace kcache::server
