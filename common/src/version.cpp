#include "kcache/version.hpp"

#include "kcache/build_info.h"

namespace kcache {

std::string version_text(std::string_view program) {
  return std::string(program) + " " + KCACHE_VERSION + " (commit " + KCACHE_COMMIT + ")\nbuilt with LLVM " +
         KCACHE_LLVM_VERSION + " and CUDA " + KCACHE_CUDA_VERSION;
}

}  // namespace kcache
