#include "kcache/http_get.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>

namespace kcache {
namespace {

Error unavailable(const std::string& what) { return make_error(ErrorCode::k_unavailable, what); }

}  // namespace

Expected<HttpConnection> HttpConnection::open(const std::string& host_in, int port, std::chrono::milliseconds timeout) {
  std::string host = host_in;
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found); rc != 0) {
    return unavailable("cannot resolve " + host + ": " + ::gai_strerror(rc));
  }
  std::string last_error = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    HttpConnection c(fd, host_in, timeout);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last_error = std::strerror(errno);
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (!c.wait(POLLOUT) || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
      last_error = err != 0 ? std::strerror(err) : "timed out";
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ::freeaddrinfo(found);
    return c;
  }
  ::freeaddrinfo(found);
  return unavailable("cannot connect to " + host_in + ":" + std::to_string(port) + ": " + last_error);
}

HttpConnection::~HttpConnection() {
  if (m_fd >= 0) ::close(m_fd);
}

Expected<void> HttpConnection::wait(short events) {
  pollfd p{m_fd, events, 0};
  int rc = 0;
  do {
    rc = ::poll(&p, 1, static_cast<int>(m_timeout.count()));
  } while (rc < 0 && errno == EINTR);
  if (rc == 0) return unavailable("timed out");
  if (rc < 0) return unavailable(std::strerror(errno));
  return {};
}

Expected<void> HttpConnection::fill() {
  char chunk[65536];
  for (;;) {
    ssize_t n = ::recv(m_fd, chunk, sizeof(chunk), 0);
    if (n > 0) {
      m_buffer.append(chunk, static_cast<std::size_t>(n));
      return {};
    }
    if (n == 0) return unavailable("the server closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return unavailable(std::strerror(errno));
    if (auto ready = wait(POLLIN); !ready) return ready;
  }
}

Expected<HttpReply> HttpConnection::get(const std::string& path,
                                        const std::vector<std::pair<std::string, std::string>>& headers) {
  std::string request = "GET " + path + " HTTP/1.1\r\nHost: " + m_host + "\r\n";
  for (const auto& [name, value] : headers) request += name + ": " + value + "\r\n";
  request += "\r\n";
  for (std::size_t sent = 0; sent < request.size();) {
    ssize_t n = ::send(m_fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (auto ready = wait(POLLOUT); !ready) return ready.error();
    } else if (n < 0 && errno != EINTR) {
      return unavailable(std::strerror(errno));
    }
  }

  std::size_t end = 0;
  while ((end = m_buffer.find("\r\n\r\n")) == std::string::npos) {
    if (m_buffer.size() > (64u << 10)) return unavailable("HTTP headers too long");
    if (auto more = fill(); !more) return more.error();
  }
  HttpReply reply;
  std::string head = m_buffer.substr(0, end);
  m_buffer.erase(0, end + 4);
  std::size_t line_end = head.find("\r\n");
  std::string status_line = head.substr(0, line_end);
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12) {
    return unavailable("not an HTTP reply: " + status_line);
  }
  reply.status = std::atoi(status_line.c_str() + 9);
  while (line_end != std::string::npos) {
    std::size_t start = line_end + 2;
    line_end = head.find("\r\n", start);
    std::string line = head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
    std::size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::size_t value = line.find_first_not_of(' ', colon + 1);
    reply.headers[name] = value == std::string::npos ? "" : line.substr(value);
  }
  if (reply.header("transfer-encoding") != "") return unavailable("chunked HTTP bodies are not supported here");
  std::string length = reply.header("content-length");
  std::size_t want = length.empty() ? 0 : std::strtoull(length.c_str(), nullptr, 10);
  while (m_buffer.size() < want) {
    if (auto more = fill(); !more) return more.error();
  }
  reply.body = m_buffer.substr(0, want);
  m_buffer.erase(0, want);
  return reply;
}

}  // namespace kcache
