// CUDA C++ source jobs (format cu): NVRTC compiles the client's source with the headers it sent
// and the toolkit's own, once per arch, in a compile worker.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "compile/compiler.hpp"

namespace kcache::server {

// Compiles a canonical source job: for each arch, PTX and cubin from one NVRTC compile for the
// real arch (-arch=sm_XX), LTO-IR from one for the virtual arch with -dlto. Every image carries
// the job's name expressions, lowered. The source sits (for NVRTC) in an empty scratch folder, so
// NVRTC finds nothing but the job's headers and the toolkit's include folders.
Expected<CompileOutput> compile_source(const Toolchain& toolchain, const CompileJob& job);

}  // namespace kcache::server
