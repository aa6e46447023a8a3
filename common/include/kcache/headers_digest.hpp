// The digest of a header set: what the daemon names NVRTC's toolkit headers by, and what the
// compiler launcher names the toolkit headers nvcc's host compile reads by (crt/host_runtime.h,
// which no preprocessed text of the source shows).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace kcache {

// The digest of the header set under `include_dirs`: every regular file's path (relative to its
// folder), size and modification time, sorted. A changed header changes one of them (what
// ccache's compiler check also relies on), without reading 30 MB at every start.
std::string cuda_headers_digest(const std::vector<std::filesystem::path>& include_dirs);

}  // namespace kcache
