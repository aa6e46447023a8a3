// kcache as a CUDA compiler launcher: `kcache nvcc ARGS...` (CMake's CMAKE_CUDA_COMPILER_LAUNCHER),
// or kcache run under the name nvcc (a symlink early on PATH), does what nvcc would do, with the
// same outputs, diagnostics and exit code. A compile it understands runs as nvcc's own plan
// (nvcc --dryrun): the preprocessors, cudafe++ and fatbinary here; each arch's cicc and ptxas on
// the daemon (build steps, kcache/step.hpp); the host compile here, its object kept as a host
// entry. Everything else, and every failure of the cache, runs the real compiler unchanged and
// is counted by reason. docs/build-farms.md says how to use it.
#pragma once

#include <optional>

namespace kcache::launcher {

// The launcher's exit code when argv names a compiler (argv[1], or argv[0] when kcache runs
// under a compiler's name); nullopt when it does not (a kcache subcommand).
std::optional<int> launch_if_compiler(int argc, char** argv);

}  // namespace kcache::launcher
