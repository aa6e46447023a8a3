// The HTTP/2 frame reader the gRPC gate runs on every byte a peer sends (server/net/h2_frames.hpp),
// and on a client's side the call watcher behind it (server/net/grpc_calls.hpp: HPACK header
// blocks, padding, message prefixes): any bytes, cut anywhere, must be read without a crash or a
// read past them, and the offsets the reader reports must add up.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "net/grpc_calls.hpp"
#include "net/h2_frames.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  // The first byte chooses the side and where the bytes are cut.
  bool from_client = (data[0] & 1) != 0;
  std::size_t piece = 1 + (data[0] >> 1);
  std::string_view bytes(reinterpret_cast<const char*>(data + 1), size - 1);
  kcache::server::net::H2FrameReader reader(from_client);
  kcache::server::net::GrpcCallWatcher calls;
  std::size_t fed = 0;
  std::uint64_t last_boundary = 0;
  for (std::size_t at = 0; at < bytes.size(); at += piece) {
    std::string_view part = bytes.substr(at, piece);
    bool ok = reader.feed(
        part,
        [&](const kcache::server::net::H2Frame& f) {
          if (from_client) calls.frame(f);
          return f.length <= (1u << 24);
        },
        [&](const kcache::server::net::H2Frame& f, std::string_view payload) {
          if (!from_client) return;
          auto declared = calls.payload(f, payload);
          if (declared && declared->length > 0xffffffffu) std::abort();  // a 32-bit field
        });
    if (!ok) return 0;
    fed += part.size();
    if (reader.offset() != fed || reader.boundary() > reader.offset() || reader.boundary() < last_boundary) std::abort();
    last_boundary = reader.boundary();
  }
  return 0;
}
