#include "kcache/checksum.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>


namespace kcache {

std::uint64_t transfer_checksum(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::string transfer_checksum_hex(std::uint64_t checksum) {
  std::string text(16, '0');
  for (int i = 15; i >= 0; --i, checksum >>= 4) text[static_cast<std::size_t>(i)] = "0123456789abcdef"[checksum & 15];
  return text;
}

std::string transfer_checksum_hex(std::string_view bytes) { return transfer_checksum_hex(transfer_checksum(bytes)); }

}  // namespace kcache
