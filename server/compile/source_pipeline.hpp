// CUDA C++ source jobs (format cu): NVRTC compiles the client's source with the headers it sent
// and the toolkit's own, once per arch, in a compile worker.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "compile/compiler.hpp"

namespace kcache::server {

// Refuses, before any compile, an #include (or __has_include) in the source or a header that
// could make NVRTC read a file of the daemon's: an absolute name, a name with a `..` part, or a
// computed one (a macro). Comments, line splices and the `%:` digraph are seen through.
// INVALID_ARGUMENT naming the file, line and directive.
Expected<void> check_includes(std::string_view source_name, std::string_view source,
                              const std::vector<std::pair<std::string_view, std::string_view>>& headers);

// Compiles a canonical source job: for each arch, PTX and cubin from one NVRTC compile for the
// real arch (-arch=sm_XX), LTO-IR from one for the virtual arch with -dlto. Every image carries
// the job's name expressions, lowered. The source sits (for NVRTC) in an empty scratch folder, so
// NVRTC finds nothing but the job's headers and the toolkit's include folders.
Expected<CompileOutput> compile_source(const Toolchain& toolchain, const CompileJob& job);

}  // namespace kcache::server
