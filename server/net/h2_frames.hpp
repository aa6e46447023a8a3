// HTTP/2 framing as the gRPC gate follows it (RFC 9113 §3.4 and §4.1): a client's connection
// preface, then frames, each a 9-byte header (24-bit length, type, flags, 31-bit stream) and a
// payload. The reader keeps no payload: it reports each frame's header once the header is whole
// and skips the payload as its bytes go by, so following a frame of any length costs nothing.
// No sockets here, for the fuzzer (fuzz/h2_frames_fuzzer.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace kcache::server::net {

// The frame types the gate acts on (RFC 9113 §6).
enum class H2Type : std::uint8_t {
  data = 0x0,
  headers = 0x1,
  priority = 0x2,
  rst_stream = 0x3,
  settings = 0x4,
  push_promise = 0x5,
  ping = 0x6,
  goaway = 0x7,
  continuation = 0x9,
};

inline constexpr std::uint8_t k_h2_flag_ack = 0x1;         // SETTINGS, PING
inline constexpr std::uint8_t k_h2_flag_end_stream = 0x1;  // DATA, HEADERS
inline constexpr std::uint8_t k_h2_flag_end_headers = 0x4;  // HEADERS, PUSH_PROMISE, CONTINUATION
inline constexpr std::uint32_t k_h2_enhance_your_calm = 0xb;
inline constexpr std::string_view k_h2_client_preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

struct H2Frame {
  std::uint32_t length = 0;  // of the payload
  std::uint8_t type = 0;
  std::uint8_t flags = 0;
  std::uint32_t stream = 0;  // the reserved bit cleared

  bool is(H2Type t) const { return type == static_cast<std::uint8_t>(t); }
};

// Follows one direction of a connection. `from_client`: the bytes start with the preface.
class H2FrameReader {
 public:
  explicit H2FrameReader(bool from_client) : m_preface_left(from_client ? k_h2_client_preface.size() : 0) {}

  // Reads the next `bytes` of the stream and calls `on_frame(const H2Frame&)` for each frame whose
  // header completes in them; on_frame returns false to stop reading (the rest is not looked at).
  // `on_payload(const H2Frame&, std::string_view piece)`, where given, gets each frame's payload
  // in the pieces it arrives in (a frame's pieces follow its on_frame, in order).
  // False when the bytes are not HTTP/2 (a wrong preface) or on_frame stopped; the reader then
  // reads nothing more.
  template <typename OnFrame, typename OnPayload>
  bool feed(std::string_view bytes, OnFrame&& on_frame, OnPayload&& on_payload) {
    while (!bytes.empty()) {
      if (m_failed) return false;
      std::size_t used = step(bytes);
      if (m_payload_piece) on_payload(static_cast<const H2Frame&>(m_frame), bytes.substr(0, used));
      bytes.remove_prefix(used);
      if (m_frame_ready) {
        m_frame_ready = false;
        if (!on_frame(static_cast<const H2Frame&>(m_frame))) {
          m_failed = true;
          return false;
        }
      }
    }
    return !m_failed;
  }
  template <typename OnFrame>
  bool feed(std::string_view bytes, OnFrame&& on_frame) {
    return feed(bytes, std::forward<OnFrame>(on_frame), [](const H2Frame&, std::string_view) {});
  }

  bool preface_done() const { return m_preface_left == 0; }
  std::uint64_t offset() const { return m_offset; }  // bytes read
  // Where the last whole frame (or the preface) ended: a frame written there would not cut
  // another in two.
  std::uint64_t boundary() const { return m_boundary; }

 private:
  // Consumes some of `bytes` (at least one), setting m_frame_ready when a header completes.
  std::size_t step(std::string_view bytes);

  std::size_t m_preface_left;
  unsigned char m_header[9] = {};
  std::size_t m_header_have = 0;
  std::uint64_t m_payload_left = 0;
  bool m_in_payload = false;
  bool m_payload_piece = false;  // the last step consumed payload bytes
  bool m_frame_ready = false;
  bool m_failed = false;
  H2Frame m_frame;
  std::uint64_t m_offset = 0, m_boundary = 0;
};

// A GOAWAY frame (RFC 9113 §6.8) naming the last stream the server saw and `error`, with `debug`
// as its debug data.
std::string h2_goaway(std::uint32_t last_stream, std::uint32_t error, std::string_view debug);

}  // namespace kcache::server::net
