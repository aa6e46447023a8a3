#include "net/h2_frames.hpp"

#include <algorithm>

namespace kcache::server::net {

std::size_t H2FrameReader::step(std::string_view bytes) {
  m_payload_piece = false;
  if (m_preface_left > 0) {
    std::size_t at = k_h2_client_preface.size() - m_preface_left;
    std::size_t n = std::min(m_preface_left, bytes.size());
    if (bytes.substr(0, n) != k_h2_client_preface.substr(at, n)) {
      m_failed = true;
      return bytes.size();
    }
    m_preface_left -= n;
    m_offset += n;
    if (m_preface_left == 0) m_boundary = m_offset;
    return n;
  }
  if (m_in_payload) {
    std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(m_payload_left, bytes.size()));
    m_payload_left -= n;
    m_offset += n;
    m_payload_piece = true;
    if (m_payload_left == 0) {
      m_in_payload = false;
      m_boundary = m_offset;
    }
    return n;
  }
  std::size_t n = std::min(sizeof m_header - m_header_have, bytes.size());
  std::copy_n(bytes.data(), n, m_header + m_header_have);
  m_header_have += n;
  m_offset += n;
  if (m_header_have < sizeof m_header) return n;
  m_header_have = 0;
  m_frame.length = (std::uint32_t{m_header[0]} << 16) | (std::uint32_t{m_header[1]} << 8) | m_header[2];
  m_frame.type = m_header[3];
  m_frame.flags = m_header[4];
  m_frame.stream = ((std::uint32_t{m_header[5]} << 24) | (std::uint32_t{m_header[6]} << 16) |
                    (std::uint32_t{m_header[7]} << 8) | m_header[8]) &
                   0x7fffffffu;
  m_payload_left = m_frame.length;
  m_in_payload = m_payload_left > 0;
  if (!m_in_payload) m_boundary = m_offset;
  m_frame_ready = true;
  return n;
}

std::string h2_goaway(std::uint32_t last_stream, std::uint32_t error, std::string_view debug) {
  std::uint32_t length = 8 + static_cast<std::uint32_t>(debug.size());
  std::string f;
  f.reserve(9 + length);
  auto put32 = [&](std::uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) f.push_back(static_cast<char>((v >> shift) & 0xff));
  };
  f.push_back(static_cast<char>((length >> 16) & 0xff));
  f.push_back(static_cast<char>((length >> 8) & 0xff));
  f.push_back(static_cast<char>(length & 0xff));
  f.push_back(static_cast<char>(H2Type::goaway));
  f.push_back(0);
  put32(0);
  put32(last_stream & 0x7fffffffu);
  put32(error);
  f.append(debug);
  return f;
}

}  // namespace kcache::server::net
