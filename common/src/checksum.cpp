#include "kcache/checksum.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstdio>

namespace kcache {

std::uint64_t transfer_checksum(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::string transfer_checksum_hex(std::string_view bytes) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(transfer_checksum(bytes)));
  return text;
}

}  // namespace kcache
