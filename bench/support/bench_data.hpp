// Deterministic benchmark data: the keys entries are stored under and the bytes of their images.
// The tool that writes a database (kcache_bench_populate) and the tools that read it through
// kcached or Redis (kcache_bench_load, kcache_bench_store) derive both from the same names, so
// no key list has to be passed between processes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/key.hpp"

namespace kcache::bench {

// The arch and kind every benchmark image is stored as (a device PTX image, as PTX input makes).
inline constexpr std::string_view k_arch = "sm_90";

// Hit-path data: `keys_per_size` entries for each image size, named "hit/SIZE/I".
Key hit_key(std::size_t size, std::uint64_t index);
// Scale data: entry I of a store holding many small images, named "scale/I".
Key scale_key(std::uint64_t index);
// The size of scale entry I: spread over 1..4 KiB, like the PTX of one small kernel.
std::size_t scale_size(std::uint64_t index);

// `size` bytes that look like PTX (directives, instructions, registers, varying immediates),
// different for every seed. Nothing parses them: they only need PTX's compressibility, so the
// store's LZ4/zstd and Redis see realistic bytes.
std::string ptx_like(std::size_t size, std::uint64_t seed);

// "4096,65536" -> {4096, 65536}; sizes may carry K/M suffixes (powers of 1024).
std::vector<std::size_t> parse_size_list(std::string_view text);
std::vector<int> parse_int_list(std::string_view text);

// 4096 -> "4 KiB", 16777216 -> "16 MiB".
std::string size_label(std::size_t size);

}  // namespace kcache::bench
