// Framed protobuf messages over a stream socket: an 8-byte little-endian length, then the
// message. Used between kcached and its workers only.
#pragma once

#include <google/protobuf/message_lite.h>

#include <chrono>
#include <cstdint>

#include "kcache/expected.hpp"

namespace kcache::server::worker {

// Largest frame either end accepts: a 64 MiB module or a result of several large images.
inline constexpr std::uint64_t k_max_frame_bytes = 1ULL << 30;

// Writes one frame; UNAVAILABLE when the peer has gone (no SIGPIPE).
Expected<void> send_message(int fd, const google::protobuf::MessageLite& message);

// Reads one frame into `message`. UNAVAILABLE when the peer closed the socket (at a frame
// boundary or mid-frame), DEADLINE_EXCEEDED when `deadline` passes first, INTERNAL for a frame
// that is oversized or does not parse.
Expected<void> receive_message(int fd, google::protobuf::MessageLite& message,
                               std::chrono::steady_clock::time_point deadline =
                                   std::chrono::steady_clock::time_point::max());

}  // namespace kcache::server::worker
