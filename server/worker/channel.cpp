#include "worker/channel.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kcache::server::worker {
namespace {

using Clock = std::chrono::steady_clock;

Error closed() { return make_error(ErrorCode::k_unavailable, "the other end closed the channel"); }

Expected<void> write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) return closed();
    if (n < 0) return make_error(ErrorCode::k_internal, std::string("channel write: ") + std::strerror(errno));
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return {};
}

Expected<void> read_all(int fd, char* data, std::size_t size, Clock::time_point deadline) {
  while (size > 0) {
    int timeout_ms = -1;
    if (deadline != Clock::time_point::max()) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return make_error(ErrorCode::k_deadline_exceeded, "no reply before the deadline");
      timeout_ms = static_cast<int>(std::min<long long>(left, 1 << 30));
    }
    pollfd p{fd, POLLIN, 0};
    int ready = ::poll(&p, 1, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return make_error(ErrorCode::k_internal, std::string("channel poll: ") + std::strerror(errno));
    if (ready == 0) continue;  // the deadline check above reports it
    ssize_t n = ::recv(fd, data, size, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return closed();
    if (n < 0) return make_error(ErrorCode::k_internal, std::string("channel read: ") + std::strerror(errno));
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return {};
}

}  // namespace

Expected<void> send_message(int fd, const google::protobuf::MessageLite& message) {
  std::string frame(8, '\0');
  std::uint64_t size = message.ByteSizeLong();
  for (int i = 0; i < 8; ++i) frame[i] = static_cast<char>((size >> (8 * i)) & 0xff);
  if (!message.AppendToString(&frame)) return make_error(ErrorCode::k_internal, "cannot serialise a message");
  return write_all(fd, frame.data(), frame.size());
}

Expected<void> receive_message(int fd, google::protobuf::MessageLite& message, Clock::time_point deadline) {
  unsigned char header[8];
  if (auto r = read_all(fd, reinterpret_cast<char*>(header), sizeof header, deadline); !r) return r;
  std::uint64_t size = 0;
  for (int i = 0; i < 8; ++i) size |= static_cast<std::uint64_t>(header[i]) << (8 * i);
  if (size > k_max_frame_bytes) {
    return make_error(ErrorCode::k_internal, "a frame of " + std::to_string(size) + " bytes is over the limit");
  }
  std::string body(size, '\0');
  if (auto r = read_all(fd, body.data(), body.size(), deadline); !r) return r;
  if (!message.ParseFromString(body)) return make_error(ErrorCode::k_internal, "a frame that does not parse");
  return {};
}

}  // namespace kcache::server::worker
