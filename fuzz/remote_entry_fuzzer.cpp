// Fuzzes the decoding of a remote entry (server/remote/entry.cpp): the bytes are split into
// HGETALL-style fields at 0xff bytes, as if anyone with Redis access had written them.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "remote/entry.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kcache;
  static const server::remote::FleetSecret secret(std::string(32, 's'));
  static const Digest fingerprint = sha256("toolchain");
  static const Key key{sha256("key")};
  std::vector<std::string> fields(1);
  for (std::size_t i = 0; i < size; ++i) {
    if (data[i] == 0xff) fields.emplace_back();
    else fields.back() += static_cast<char>(data[i]);
  }
  for (Side side : {Side::device, Side::host}) {
    server::remote::DecodedEntry entry = server::remote::decode_fields(secret, side, key, fingerprint, fields);
    for (const server::Image& image : entry.images) {
      if (image.meta.size != image.data.size()) __builtin_trap();  // verified images only
    }
  }
  return 0;
}
