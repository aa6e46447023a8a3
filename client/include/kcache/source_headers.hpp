// The headers a CUDA C++ source job sends: kcached reads no include file of the client's, so the
// client follows the source's #include directives through its own folders and sends what it
// finds, under the name each directive spells (NVRTC looks headers up by that name). What it does
// not find (<cuda_fp16.h>, <cooperative_groups.h>) is left to the daemon's toolkit.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kcache/expected.hpp"

namespace kcache {

struct CollectedHeader {
  std::string name;                 // as the #include spells it: "detail/math.cuh"
  std::string bytes;
  std::filesystem::path found_at;   // where it was read, for messages
};

// Follows `source`'s includes, transitively: a "quoted" name is looked for beside the file that
// includes it (not for the source itself when `source_dir` is empty: a source held in memory),
// then in `include_dirs` in order; an <angled> one in `include_dirs` alone. Each
// header found is read once. INVALID_ARGUMENT when one name finds two different files, when a
// name is absolute or goes through `..` (the daemon refuses those), for a computed include, and
// past k_max_source_headers headers or `max_bytes` bytes in all; NOT_FOUND never (unfound names
// are the daemon's to find or refuse).
Expected<std::vector<CollectedHeader>> collect_headers(std::string_view source, const std::filesystem::path& source_dir,
                                                       const std::vector<std::filesystem::path>& include_dirs,
                                                       std::uint64_t max_bytes = 256ULL << 20);

}  // namespace kcache
