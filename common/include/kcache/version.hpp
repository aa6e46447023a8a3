// What `--version` prints for each of kcache's programs.
#pragma once

#include <string>
#include <string_view>

namespace kcache {

// "PROGRAM 0.1.0 (commit 1a2b3c4d5e6f)", then the LLVM and CUDA versions it was built with, a
// line each.
std::string version_text(std::string_view program);

}  // namespace kcache
