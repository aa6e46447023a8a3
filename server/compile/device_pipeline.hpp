// Device pipeline: LLVM IR -> PTX per arch (parse, verify, check, optimise, NVPTX codegen), and
// PTX -> cubin through ptxas.
#pragma once

#include "compile/compiler.hpp"

namespace kcache::server {

Expected<CompileOutput> compile_device(const Toolchain& toolchain, const CompileJob& job);

}  // namespace kcache::server
