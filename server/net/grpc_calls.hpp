// What the gRPC gate learns of each call a client starts on one connection: its method (the
// :path of its HEADERS, HPACK-decoded with nghttp2's inflater, which keeps the connection's
// dynamic table) and the length its first request message declares (the 5-byte gRPC prefix at
// the start of its DATA). The gate counts a call whose message gRPC will refuse for its size
// (gRPC refuses it before any handler or interceptor sees the call, so nothing else can).
// No sockets here, for the fuzzer (fuzz/h2_frames_fuzzer.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "net/h2_frames.hpp"

namespace kcache::server::net {

// A call's first request message, as its prefix declares it.
struct DeclaredMessage {
  std::string path;  // "/kcache.v1.KCache/Compile"
  std::uint64_t length = 0;
};

class GrpcCallWatcher {
 public:
  GrpcCallWatcher();
  ~GrpcCallWatcher();
  GrpcCallWatcher(const GrpcCallWatcher&) = delete;
  GrpcCallWatcher& operator=(const GrpcCallWatcher&) = delete;

  // A frame from the client, as H2FrameReader reports it, then each piece of its payload. A
  // piece that completes a call's message prefix answers that call's declared message (once per
  // call).
  void frame(const H2Frame& frame);
  std::optional<DeclaredMessage> payload(const H2Frame& frame, std::string_view piece);

  // A header block that did not decode (or a frame out of order) leaves the connection's header
  // table unknown: the watcher then stops and answers nothing more. gRPC itself closes such a
  // connection.
  bool stopped() const { return m_stopped; }

 private:
  struct Call {
    std::string path;
    unsigned char prefix[5] = {};
    std::size_t prefix_have = 0;
  };
  // HEADERS and CONTINUATION: the header block's bytes of one piece.
  void header_block(std::string_view piece, bool last);
  // DATA: a piece of the payload of a call's stream.
  std::optional<DeclaredMessage> data(std::string_view piece);

  struct Inflater;
  std::unique_ptr<Inflater> m_inflater;
  bool m_stopped = false;

  // The frame whose payload is coming: where its own bytes start and end (padding and the
  // priority fields are not the block's or the message's).
  H2Frame m_frame;
  std::uint32_t m_seen = 0;     // of its payload
  std::uint32_t m_skip = 0;     // leading bytes that are not content (the pad length, priority)
  std::uint32_t m_content = 0;  // content bytes, after m_skip
  bool m_padded_unknown = false;  // PADDED: the pad length byte has yet to come
  bool m_block_open = false;      // a header block began and its END_HEADERS has not come
  std::uint32_t m_block_stream = 0;
  std::string m_block_path;       // the :path of the block being decoded

  std::map<std::uint32_t, Call> m_calls;  // by stream: calls whose prefix is not yet whole
};

}  // namespace kcache::server::net
