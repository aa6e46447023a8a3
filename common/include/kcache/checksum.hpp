// A fast checksum for bytes in transit: XXH3-64 (Debian's libxxhash, compiled in from its
// header, so no program gains a shared library to load).
//
// Why not SHA-256 for this: the HTTP image API's client used to hash every image it received,
// which on a 16-client 64 KiB load was 38% of all the CPU the machine spent (bench/README.md,
// "The hit path, profiled"). kcached computes this checksum over bytes it has verified against
// the image's SHA-256 (on reading them from RocksDB, or on storing them), so a client that checks
// it knows it got exactly those bytes: the same guarantee against corruption on the way, at about
// a thirtieth of the cost. The SHA-256 digest still travels with the image's metadata.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kcache {

std::uint64_t transfer_checksum(std::string_view bytes);
// As 16 lower-case hex digits, the form the X-Kcache-Xxh3 header carries.
std::string transfer_checksum_hex(std::string_view bytes);
std::string transfer_checksum_hex(std::uint64_t checksum);

}  // namespace kcache
