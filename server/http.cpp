#include "http.hpp"

#include <httplib.h>

#include <chrono>

namespace kcache::server {

Expected<std::unique_ptr<HttpListener>> HttpListener::start(const std::string& listen, const std::string& what,
                                                            const HttpTls& tls,
                                                            const std::function<void(httplib::Server&)>& routes) {
  auto colon = listen.rfind(':');
  int port = -1;
  if (colon != std::string::npos) {
    try {
      std::size_t used = 0;
      port = std::stoi(listen.substr(colon + 1), &used);
      if (used != listen.size() - colon - 1) port = -1;
    } catch (const std::exception&) {
      port = -1;
    }
  }
  if (port < 0 || port > 65535) return make_error(ErrorCode::k_invalid_argument, what + " '" + listen + "' is not HOST:PORT");
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);

  std::unique_ptr<HttpListener> l(new HttpListener());
  if (tls.enabled()) {
    auto ssl = std::make_unique<httplib::SSLServer>(tls.cert_file.c_str(), tls.key_file.c_str(),
                                                    tls.client_ca_file.empty() ? nullptr : tls.client_ca_file.c_str());
    if (!ssl->is_valid()) {
      return make_error(ErrorCode::k_failed_precondition,
                        what + ": cannot use the TLS certificate " + tls.cert_file + " with key " + tls.key_file);
    }
    l->m_server = std::move(ssl);
  } else {
    l->m_server = std::make_unique<httplib::Server>();
  }
  routes(*l->m_server);
  l->m_port = port == 0 ? l->m_server->bind_to_any_port(host) : (l->m_server->bind_to_port(host, port) ? port : -1);
  if (l->m_port <= 0) return make_error(ErrorCode::k_unavailable, what + ": cannot listen on " + listen);
  l->m_thread = std::thread([server = l->m_server.get()] { server->listen_after_bind(); });
  // stop() before the loop has started does nothing and the loop would then run for ever, so a
  // listener is only handed out once it runs (cpp-httplib 0.11 has no wait_until_ready()).
  while (!l->m_server->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return l;
}

HttpListener::~HttpListener() {
  if (m_server) m_server->stop();
  if (m_thread.joinable()) m_thread.join();
}

}  // namespace kcache::server
