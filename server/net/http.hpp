// Plain HTTP/1.1 (or HTTPS) listeners: the Prometheus endpoint (--metrics-listen) and the image
// read API (--http-listen, api/http_api.hpp).
//
// Why not cpp-httplib's own listener: it serves each connection on a pool thread from accept()
// on, so a client that trickles one header byte every 2 s (or a TLS ClientHello) holds a thread
// for as long as it likes; 70 of them froze the image API (issue 14). It also listens with a
// backlog of 5 (compiled into Debian's libcpp-httplib, not settable), drops the second of two
// pipelined requests (its line reader reads past the first), and reads request bodies before
// routing. So the listener here owns the sockets, and cpp-httplib only parses and routes
// (Server::process_request, through a stream that ends where the request ends: http_request.hpp,
// that part without sockets, for the fuzzer).
//
// Event threads (a few, each with its own epoll and its own connections; the first accepts and
// deals connections out in turn) read every connection's TLS handshake and request headers without blocking, under a
// deadline for the whole request, and answer there what memory can answer: the handlers read
// with Store::Reach::memory, and an image from the hot cache goes from where it lies to the
// socket (set_shared_content), sent without blocking as the socket takes it. A request whose
// answer needs a wait (RocksDB's files, the remote tier) is passed (defer()) to a small pool of
// threads, which answers it with blocking writes under a deadline and gives the connection back.
// So a hit costs no hand-off between threads, which on this project's machines was most of its
// cost (bench/README.md, "The hit path, profiled"). A request that is not complete within its
// deadline, or too large, or carries a body (every route is a GET), is answered and closed by the
// event thread. Waiting connections cost a file descriptor and a buffer, never a thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "kcache/expected.hpp"
#include "net/tls.hpp"

namespace kcache::server {

class Router;  // http_request.hpp: cpp-httplib's router, with the fast routes

// PEM files for HTTPS (all empty: plain HTTP), as for the gRPC gate.
using HttpTls = net::TlsFiles;

namespace net {
class FdBudget;
}

struct HttpLimits {
  std::size_t event_threads = 0;       // 0: one per core, at most 4
  std::size_t threads = 16;            // requests that need a wait, answered at once
  // Open at once; when full, a new connection takes the place of the one waiting for a request
  // nearest its deadline (a slow or idle client), or is closed at accept when none waits (so a
  // flood of slow clients cannot keep a scraper or a cached compile out).
  std::size_t max_connections = 512;
  std::size_t max_per_peer = 256;      // open at once from one peer address
  // From accept (TLS handshake included), or from a request's first byte, to the end of its
  // headers: a slow client is cut off here, whatever pace it keeps.
  std::chrono::milliseconds request_time{5000};
  std::chrono::milliseconds idle_time{2000};    // a kept-alive connection waiting for its next request
  std::chrono::milliseconds write_time{10000};  // writing one whole answer
  std::size_t max_header_bytes = 16 << 10;      // request line and headers
  int backlog = 4096;                            // as gRPC's
};

class HttpListener {
 public:
  // Binds HOST:PORT (port 0: a free one), lets `routes` register GET handlers on a cpp-httplib
  // Server used only for parsing and routing, and serves. `what` names the listener in errors
  // ("--metrics-listen"). Each connection holds one of `fds`'s descriptors.
  static Expected<std::unique_ptr<HttpListener>> start(const std::string& listen, const std::string& what,
                                                       const HttpTls& tls, const HttpLimits& limits, net::FdBudget& fds,
                                                       const std::function<void(Router&)>& routes);
  ~HttpListener();  // stops accepting, cuts every connection, joins the threads
  int port() const;

  class Impl;

 private:
  explicit HttpListener(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache::server
