#include "kcache/checksum.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "kcache/sha256.hpp"

namespace kcache {

std::uint64_t transfer_checksum(std::string_view bytes) { return XXH3_64bits(bytes.data(), bytes.size()); }

std::string transfer_checksum_hex(std::uint64_t checksum) {
  char bytes[8];  // big-endian, so the hex reads as the number
  for (int i = 7; i >= 0; --i, checksum >>= 8) bytes[i] = static_cast<char>(checksum & 0xff);
  return to_hex(std::string_view(bytes, sizeof bytes));
}

std::string transfer_checksum_hex(std::string_view bytes) { return transfer_checksum_hex(transfer_checksum(bytes)); }

}  // namespace kcache
