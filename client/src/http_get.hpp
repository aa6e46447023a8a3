// A minimal HTTP/1.1 GET client over a plain TCP socket, for reads from kcached's HTTP image API:
// the CLI's fast path (client/cli/front.cpp) and Client::fetch. Written here rather than taken
// from cpp-httplib because Debian ships that as a shared library whose load and OpenSSL
// initialisation cost about 2.2 ms per process, half of the whole budget of a cached `kcache
// compile`. It speaks only what kcached's HTTP API answers: keep-alive, Content-Length bodies,
// no TLS (a TLS client takes the gRPC path). Anything else is refused, never guessed at: a reply
// without Content-Length, a chunked one, a length that is not a plain number up to
// k_max_http_body_bytes; and a connection on which a request failed is never used again.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kcache/expected.hpp"

namespace kcache {

// The largest reply body accepted: more than any image kcached serves (modules are capped at
// 64 MiB by default), far less than a peer could make a client allocate otherwise.
inline constexpr std::uint64_t k_max_http_body_bytes = 1ull << 30;

struct HttpReply {
  std::string version;  // HTTP/1.1 or HTTP/1.0
  int status = 0;
  std::string body;
  // The head as received (status line and header lines), and where each header's name and value
  // (without the blanks around it) lie in it: one string for all headers, not a string each.
  std::string head;
  struct Field {
    std::uint32_t name_at, name_size, value_at, value_size;
  };
  std::vector<Field> fields;

  // The value of the first header named `name` (names match in any case), "" when there is none.
  // Valid as long as the reply.
  std::string_view header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

class HttpConnection {
 public:
  // Connects to HOST:PORT within `timeout`; every later wait to read or write gets the same limit.
  static Expected<HttpConnection> open(const std::string& host, int port, std::chrono::milliseconds timeout);
  HttpConnection(HttpConnection&& o) noexcept
      : m_fd(std::exchange(o.m_fd, -1)), m_host(std::move(o.m_host)), m_timeout(o.m_timeout),
        m_buffer(std::move(o.m_buffer)), m_reusable(std::exchange(o.m_reusable, false)) {}
  HttpConnection& operator=(HttpConnection&&) = delete;
  ~HttpConnection();

  // GET `path` with extra `headers`. UNAVAILABLE for a reply this client does not take (see
  // above), a timeout or a closed connection; the connection is then no longer reusable.
  Expected<HttpReply> get(const std::string& path, const std::vector<std::pair<std::string, std::string>>& headers);

  // Whether another request may be sent: every earlier reply was read whole, with nothing after
  // it, and none said "Connection: close".
  bool reusable() const { return m_reusable; }

 private:
  HttpConnection(int fd, std::string host, std::chrono::milliseconds timeout)
      : m_fd(fd), m_host(std::move(host)), m_timeout(timeout) {}
  Expected<void> wait(short events);
  Expected<std::size_t> receive(char* into, std::size_t size);  // one recv: at least a byte, or the error
  Expected<void> fill();  // reads more into m_buffer
  Expected<HttpReply> exchange(const std::string& path, const std::vector<std::pair<std::string, std::string>>& headers);

  int m_fd = -1;
  std::string m_host;
  std::chrono::milliseconds m_timeout;
  std::string m_buffer;  // bytes read but not yet consumed
  bool m_reusable = true;
};

}  // namespace kcache
