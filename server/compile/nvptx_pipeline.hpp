// NVPTX pipeline: LLVM IR -> PTX per arch (parse, verify, link the job's modules, link rtlib and
// libdevice, check, internalize, optimise, NVPTX codegen), and PTX -> cubin (compile/cubin.hpp),
// with the job's own PTX modules linked in.
#pragma once

#include "compile/compiler.hpp"

namespace kcache::server {

Expected<CompileOutput> compile_nvptx(const Toolchain& toolchain, const CompileJob& job);

}  // namespace kcache::server
