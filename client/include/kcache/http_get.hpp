// A minimal HTTP/1.1 GET client over a plain TCP socket, for reads from kcached's HTTP image API:
// the CLI's fast path (client/cli/front.cpp) and Client::fetch. Written here rather than taken
// from cpp-httplib because Debian ships that as a shared library whose load and OpenSSL
// initialisation cost about 2.2 ms per process, half of the whole budget of a cached `kcache
// compile`. It speaks only what kcached's HTTP API answers: keep-alive, Content-Length bodies,
// no TLS (a TLS client takes the gRPC path).
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kcache/expected.hpp"

namespace kcache {

struct HttpReply {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string() : it->second;
  }
};

class HttpConnection {
 public:
  // Connects to HOST:PORT within `timeout`; every later read or write gets the same limit.
  static Expected<HttpConnection> open(const std::string& host, int port, std::chrono::milliseconds timeout);
  HttpConnection(HttpConnection&& o) noexcept : m_fd(std::exchange(o.m_fd, -1)), m_host(std::move(o.m_host)),
                                                m_timeout(o.m_timeout), m_buffer(std::move(o.m_buffer)) {}
  HttpConnection& operator=(HttpConnection&&) = delete;
  ~HttpConnection();

  // GET `path` with extra `headers`; the connection stays open for the next request.
  Expected<HttpReply> get(const std::string& path, const std::vector<std::pair<std::string, std::string>>& headers);

 private:
  HttpConnection(int fd, std::string host, std::chrono::milliseconds timeout)
      : m_fd(fd), m_host(std::move(host)), m_timeout(timeout) {}
  Expected<void> wait(short events);
  Expected<void> fill();  // reads more into m_buffer

  int m_fd = -1;
  std::string m_host;
  std::chrono::milliseconds m_timeout;
  std::string m_buffer;  // bytes read but not yet consumed
};

}  // namespace kcache
