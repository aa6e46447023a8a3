// PTX -> cubin: nvJitLink in process where the toolkit has it, else ptxas (and nvlink) as
// processes. Several PTX modules (relocatable device code) are linked into one cubin, and
// libcudadevrt is linked where the PTX calls the device runtime.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "compile/compiler.hpp"

namespace kcache::server {

// Assembles and links `ptx` (one module or several) into a cubin for `arch`. `user_ptx` says
// PTX came from the client, so complaints are about the input (INVALID_ARGUMENT), not about
// kcache (INTERNAL). Warnings come back verbatim in `diagnostics`; the image lists every kernel
// with its registers, memory and spills.
Expected<Image> assemble_cubin(const Toolchain& toolchain, const CompileJob& job, const std::vector<std::string_view>& ptx,
                               const std::string& arch, bool user_ptx, std::vector<std::string>& diagnostics);

// Fills registers, shared/local memory and spills from `ptxas -v` output (ptxas's, nvJitLink's,
// NVRTC's with --ptxas-options=-v) into `kernels`, adding kernels it names that are not there.
void read_resource_usage(const std::string& log, std::vector<KernelInfo>& kernels);

// `log` without ptxas's resource-usage lines: what is left is warnings and notes for people.
std::string without_resource_usage(const std::string& log);

// Kernel names of a PTX module, from its .entry directives.
std::vector<KernelInfo> ptx_entries(std::string_view ptx);

}  // namespace kcache::server
