// Plain HTTP/1.1 (or HTTPS) listeners on their own thread, served by cpp-httplib: the Prometheus
// endpoint (--metrics-listen) and the image read API (--http-listen, service/http_api.hpp).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "kcache/expected.hpp"

namespace httplib {
class Server;
}

namespace kcache::server {

// PEM files for HTTPS: the server's chain and key, and a client CA that makes client certificates
// required (mutual TLS). All empty: plain HTTP.
struct HttpTls {
  std::string cert_file, key_file, client_ca_file;
  bool enabled() const { return !cert_file.empty(); }
};

class HttpListener {
 public:
  // Binds HOST:PORT (port 0: a free one), lets `routes` register handlers, and serves on a
  // thread. `what` names the listener in errors ("--metrics-listen").
  static Expected<std::unique_ptr<HttpListener>> start(const std::string& listen, const std::string& what,
                                                       const HttpTls& tls,
                                                       const std::function<void(httplib::Server&)>& routes);
  ~HttpListener();
  int port() const { return m_port; }

 private:
  HttpListener() = default;
  std::unique_ptr<httplib::Server> m_server;
  std::thread m_thread;
  int m_port = 0;
};

}  // namespace kcache::server
