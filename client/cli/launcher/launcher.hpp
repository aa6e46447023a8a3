// kcache as a CUDA compiler launcher: `kcache nvcc ARGS...` (CMake's CMAKE_CUDA_COMPILER_LAUNCHER),
// or kcache run under the name nvcc (a symlink early on PATH), does what nvcc would do, with the
// same outputs, diagnostics and exit code. A compile it understands runs as nvcc's own plan
// (nvcc --dryrun): the preprocessors, cudafe++ and fatbinary here; each arch's cicc and ptxas on
// the daemon (build steps, kcache/step.hpp); the host compile here, its object kept as a host
// entry. Everything else, and every failure of the cache, runs the real compiler unchanged and
// is counted by reason. docs/build-farms.md says how to use it.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kcache::launcher {

// The launcher's exit code when argv names a compiler (argv[1], or argv[0] when kcache runs
// under a compiler's name); nullopt when it does not (a kcache subcommand).
std::optional<int> launch_if_compiler(int argc, char** argv);

// Runs the real compiler in place of this process: its outputs, diagnostics and exit code.
[[noreturn]] void exec_compiler(const std::vector<std::string>& argv);

// clang's device link (clang_link.cpp): a clang link with --offload-link, run by clang with a
// toolkit of kcache's own in which nvlink is kcache; and each nvlink that reaches kcache so, a
// step on the daemon. `real_nvlink` finds the toolkit's nvlink for kcache run as nvlink.
[[noreturn]] void launch_clang_link(const std::string& clang, std::vector<std::string> args);
int launch_nvlink(const std::string& nvlink, const std::vector<std::string>& args);
std::string real_nvlink(const std::string& invoked_as);

}  // namespace kcache::launcher
