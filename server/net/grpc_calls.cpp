#include "net/grpc_calls.hpp"

#include <nghttp2/nghttp2.h>

#include <algorithm>

namespace kcache::server::net {
namespace {

// RFC 9113 §6.1, §6.2.
constexpr std::uint8_t k_flag_end_headers = 0x4;
constexpr std::uint8_t k_flag_padded = 0x8;
constexpr std::uint8_t k_flag_priority = 0x20;
constexpr std::uint8_t k_type_continuation = 0x9;

// Calls whose prefix has not come: more than a connection's streams (gRPC allows 128 at once),
// so only a client that opens calls and never sends their messages sees its oldest forgotten.
constexpr std::size_t k_max_calls = 512;

}  // namespace

struct GrpcCallWatcher::Inflater {
  nghttp2_hd_inflater* hd = nullptr;
  ~Inflater() {
    if (hd != nullptr) nghttp2_hd_inflate_del(hd);
  }
};

GrpcCallWatcher::GrpcCallWatcher() : m_inflater(std::make_unique<Inflater>()) {
  if (nghttp2_hd_inflate_new(&m_inflater->hd) != 0) m_stopped = true;
}

GrpcCallWatcher::~GrpcCallWatcher() = default;

void GrpcCallWatcher::frame(const H2Frame& frame) {
  if (m_stopped) return;
  m_frame = frame;
  m_seen = 0;
  m_skip = 0;
  m_padded_unknown = false;
  m_content = frame.length;
  bool continuation = frame.type == k_type_continuation;
  // A header block is HEADERS then CONTINUATIONs on its stream, nothing between (RFC 9113 §6.10).
  if (m_block_open != continuation || (continuation && frame.stream != m_block_stream)) {
    m_stopped = true;
    return;
  }
  bool headers = frame.is(H2Type::headers);
  bool data = frame.is(H2Type::data);
  if ((headers || data) && (frame.flags & k_flag_padded) != 0) {
    m_padded_unknown = true;  // its first byte says how long the padding at its end is
    m_skip = 1;
  }
  if (headers && (frame.flags & k_flag_priority) != 0) m_skip += 5;
  if (m_skip > frame.length) {
    m_stopped = true;
    return;
  }
  m_content = frame.length - m_skip;
  if (headers) {
    m_block_open = true;
    m_block_stream = frame.stream;
    m_block_path.clear();
  }
  if (frame.is(H2Type::rst_stream)) m_calls.erase(frame.stream);  // a cancelled call sends no message
  // A block fragment of no bytes still ends its block here.
  if ((headers || continuation) && !m_padded_unknown && m_content == 0) {
    header_block({}, (frame.flags & k_flag_end_headers) != 0);
  }
}

std::optional<DeclaredMessage> GrpcCallWatcher::payload(const H2Frame& frame, std::string_view piece) {
  bool headers = frame.is(H2Type::headers), continuation = frame.type == k_type_continuation;
  bool data = frame.is(H2Type::data);
  std::optional<DeclaredMessage> declared;
  while (!piece.empty() && !m_stopped && (headers || continuation || data)) {
    if (m_seen < m_skip) {
      std::size_t n = std::min<std::size_t>(m_skip - m_seen, piece.size());
      if (m_padded_unknown && m_seen == 0) {
        auto pad = static_cast<unsigned char>(piece[0]);
        m_padded_unknown = false;
        if (pad > m_content) {
          m_stopped = true;  // a protocol error gRPC closes the connection for
          break;
        }
        m_content -= pad;
        if (!data && m_content == 0) header_block({}, (frame.flags & k_flag_end_headers) != 0);
      }
      m_seen += static_cast<std::uint32_t>(n);
      piece.remove_prefix(n);
      continue;
    }
    std::uint32_t at = m_seen - m_skip;  // into the content
    if (at >= m_content) break;          // the padding
    std::size_t n = std::min<std::size_t>(m_content - at, piece.size());
    std::string_view content = piece.substr(0, n);
    m_seen += static_cast<std::uint32_t>(n);
    piece.remove_prefix(n);
    bool last = m_seen - m_skip == m_content;
    if (data) {
      if (auto d = this->data(content)) declared = std::move(d);
    } else {
      header_block(content, last && (frame.flags & k_flag_end_headers) != 0);
    }
  }
  return declared;
}

void GrpcCallWatcher::header_block(std::string_view piece, bool last) {
  auto* in = reinterpret_cast<std::uint8_t*>(const_cast<char*>(piece.data()));
  std::size_t left = piece.size();
  for (;;) {
    nghttp2_nv nv;
    int flags = 0;
    ssize_t used = nghttp2_hd_inflate_hd2(m_inflater->hd, &nv, &flags, in, left, last ? 1 : 0);
    if (used < 0) {
      m_stopped = true;
      return;
    }
    in += used;
    left -= static_cast<std::size_t>(used);
    if ((flags & NGHTTP2_HD_INFLATE_EMIT) != 0) {
      std::string_view name(reinterpret_cast<const char*>(nv.name), nv.namelen);
      if (name == ":path") m_block_path.assign(reinterpret_cast<const char*>(nv.value), nv.valuelen);
    }
    if ((flags & NGHTTP2_HD_INFLATE_FINAL) != 0) {
      nghttp2_hd_inflate_end_headers(m_inflater->hd);
      m_block_open = false;
      // A block with a :path starts a call (trailers have none).
      if (!m_block_path.empty() && !m_calls.contains(m_block_stream)) {
        if (m_calls.size() >= k_max_calls) m_calls.erase(m_calls.begin());
        m_calls[m_block_stream].path = std::move(m_block_path);
      }
      m_block_path.clear();
      return;
    }
    if ((flags & NGHTTP2_HD_INFLATE_EMIT) == 0 && left == 0) return;
  }
}

std::optional<DeclaredMessage> GrpcCallWatcher::data(std::string_view piece) {
  auto it = m_calls.find(m_frame.stream);
  if (it == m_calls.end()) return std::nullopt;
  Call& call = it->second;
  std::size_t n = std::min(sizeof call.prefix - call.prefix_have, piece.size());
  std::copy_n(piece.data(), n, call.prefix + call.prefix_have);
  call.prefix_have += n;
  if (call.prefix_have < sizeof call.prefix) return std::nullopt;
  // The prefix: a compressed flag, then the message's length, big-endian (gRPC's HTTP/2 protocol).
  std::uint64_t length = (std::uint64_t{call.prefix[1]} << 24) | (std::uint64_t{call.prefix[2]} << 16) |
                         (std::uint64_t{call.prefix[3]} << 8) | call.prefix[4];
  DeclaredMessage declared{std::move(call.path), length};
  m_calls.erase(it);
  return declared;
}

}  // namespace kcache::server::net
