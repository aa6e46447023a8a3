#include "http.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "config.hpp"
#include "http_request.hpp"

namespace kcache::server {
namespace {

using Clock = std::chrono::steady_clock;

struct Connection {
  int fd = -1;
  SSL* ssl = nullptr;
  bool handshaken = false;
  std::string in;  // received and not yet answered: the request being read, and any pipelined after it
  Clock::time_point deadline;
  bool request_started = false;  // deadline is the request's, not the idle wait's
  std::size_t answered = 0;
  std::string peer_ip, local_ip;
  int peer_port = 0, local_port = 0;

  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    if (ssl != nullptr) SSL_free(ssl);
    if (fd >= 0) ::close(fd);
  }
};

void address_of(const sockaddr_storage& a, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    port = ntohs(v6.sin6_port);
  }
  ip = text;
}

// Answers go to the connection's socket (through TLS when it has it), each within its own
// deadline from start_answer(): a pool thread waits for a slow reader no longer than that.
class SocketSink final : public AnswerSink {
 public:
  SocketSink(Connection& c, std::chrono::milliseconds write_time) : m_c(c), m_write_time(write_time) {}

  void start_answer() override { m_deadline = Clock::now() + m_write_time; }
  bool write(const char* ptr, std::size_t size) override {
    std::size_t done = 0;
    while (done < size) {
      short wait = 0;
      if (m_c.ssl != nullptr) {
        int n = SSL_write(m_c.ssl, ptr + done, static_cast<int>(std::min<std::size_t>(size - done, INT32_MAX)));
        if (n > 0) {
          done += static_cast<std::size_t>(n);
          continue;
        }
        int e = SSL_get_error(m_c.ssl, n);
        if (e == SSL_ERROR_WANT_WRITE) wait = POLLOUT;
        else if (e == SSL_ERROR_WANT_READ) wait = POLLIN;
      } else {
        ssize_t n = ::send(m_c.fd, ptr + done, size - done, MSG_NOSIGNAL);
        if (n > 0) {
          done += static_cast<std::size_t>(n);
          continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) wait = POLLOUT;
        else if (n < 0 && errno == EINTR) continue;
      }
      if (wait == 0 || !await(wait)) return false;
    }
    return true;
  }

 private:
  bool await(short events) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(m_deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{m_c.fd, events, 0};
    int r = ::poll(&p, 1, static_cast<int>(left));
    return r > 0 && (p.revents & (POLLERR | POLLNVAL)) == 0;
  }
  Connection& m_c;
  const std::chrono::milliseconds m_write_time;
  Clock::time_point m_deadline = Clock::now();
};

}  // namespace

class HttpListener::Impl {
 public:
  Impl(std::string what, HttpLimits limits) : m_what(std::move(what)), m_limits(limits) {}
  ~Impl() { stop(); }

  Expected<void> open(const ListenAddress& address, const HttpTls& tls);
  void run();
  void stop();

  Router m_router;
  int m_port = 0;

 private:
  // Event thread.
  void loop();
  void accept_all();
  void on_event(Connection& c);  // readable (or writable, during a TLS handshake)
  void wait_for_request(std::unique_ptr<Connection> c);  // adopts c and reads what is there
  void close_with(std::unique_ptr<Connection> c, int status, const std::string& reason, const std::string& message);
  void forget(int fd);
  // Pool threads.
  void serve();
  void answer_all(std::unique_ptr<Connection> c);
  void give_back(std::unique_ptr<Connection> c);

  const std::string m_what;
  const HttpLimits m_limits;
  SSL_CTX* m_tls = nullptr;
  int m_listen_fd = -1, m_epoll_fd = -1, m_wake_fd = -1;
  std::atomic<std::size_t> m_open{0};  // connections, wherever they are
  std::map<int, std::unique_ptr<Connection>> m_waiting;  // event thread only

  std::mutex m_mutex;  // guards everything below
  std::condition_variable m_work;
  std::deque<std::unique_ptr<Connection>> m_ready;     // complete requests, for the pool
  std::vector<std::unique_ptr<Connection>> m_returned;  // answered, back to the event thread
  std::set<int> m_busy;                                 // fds a pool thread is answering on
  bool m_stopping = false;

  std::thread m_loop;
  std::vector<std::thread> m_pool;
};

Expected<void> HttpListener::Impl::open(const ListenAddress& address, const HttpTls& tls) {
  if (tls.enabled()) {
    m_tls = SSL_CTX_new(TLS_server_method());
    bool ok = m_tls != nullptr && SSL_CTX_set_min_proto_version(m_tls, TLS1_2_VERSION) == 1 &&
              SSL_CTX_use_certificate_chain_file(m_tls, tls.cert_file.c_str()) == 1 &&
              SSL_CTX_use_PrivateKey_file(m_tls, tls.key_file.c_str(), SSL_FILETYPE_PEM) == 1 &&
              SSL_CTX_check_private_key(m_tls) == 1;
    if (ok && !tls.client_ca_file.empty()) {
      ok = SSL_CTX_load_verify_locations(m_tls, tls.client_ca_file.c_str(), nullptr) == 1;
      if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(tls.client_ca_file.c_str())) {
        SSL_CTX_set_client_CA_list(m_tls, names);
      }
      SSL_CTX_set_verify(m_tls, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
    }
    if (!ok) {
      return make_error(ErrorCode::k_failed_precondition,
                        m_what + ": cannot use the TLS certificate " + tls.cert_file + " with key " + tls.key_file);
    }
    SSL_CTX_set_mode(m_tls, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  }

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string port = std::to_string(address.port);
  if (getaddrinfo(address.host.empty() ? nullptr : address.host.c_str(), port.c_str(), &hints, &found) != 0) {
    return make_error(ErrorCode::k_invalid_argument, m_what + ": cannot resolve '" + address.host + "'");
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && m_listen_fd < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, m_limits.backlog) == 0) {
      m_listen_fd = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(found);
  if (m_listen_fd < 0) {
    return make_error(ErrorCode::k_unavailable,
                      m_what + ": cannot listen on " + address.host + ":" + port + " (" + why + ")");
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(m_listen_fd, reinterpret_cast<sockaddr*>(&bound), &length);
  std::string ip;
  address_of(bound, ip, m_port);

  m_epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  m_wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m_epoll_fd < 0 || m_wake_fd < 0) return make_error(ErrorCode::k_internal, m_what + ": epoll: " + std::strerror(errno));
  for (int fd : {m_listen_fd, m_wake_fd}) {
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    ::epoll_ctl(m_epoll_fd, EPOLL_CTL_ADD, fd, &e);
  }
  return {};
}

void HttpListener::Impl::run() {
  m_loop = std::thread([this] { loop(); });
  for (std::size_t i = 0; i < std::max<std::size_t>(1, m_limits.threads); ++i) m_pool.emplace_back([this] { serve(); });
}

void HttpListener::Impl::stop() {
  {
    std::lock_guard lock(m_mutex);
    if (m_stopping && !m_loop.joinable()) return;
    m_stopping = true;
    // A pool thread may be waiting for a slow reader: cut it off rather than wait out the deadline.
    for (int fd : m_busy) ::shutdown(fd, SHUT_RDWR);
  }
  m_work.notify_all();
  if (m_wake_fd >= 0) {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(m_wake_fd, &one, sizeof one);
  }
  if (m_loop.joinable()) m_loop.join();
  for (std::thread& t : m_pool) {
    if (t.joinable()) t.join();
  }
  m_waiting.clear();
  m_ready.clear();
  m_returned.clear();
  for (int fd : {m_listen_fd, m_epoll_fd, m_wake_fd}) {
    if (fd >= 0) ::close(fd);
  }
  m_listen_fd = m_epoll_fd = m_wake_fd = -1;
  if (m_tls != nullptr) SSL_CTX_free(m_tls);
  m_tls = nullptr;
}

void HttpListener::Impl::loop() {
  std::vector<epoll_event> events(128);
  for (;;) {
    {
      std::lock_guard lock(m_mutex);
      if (m_stopping) return;
    }
    // Wake for the nearest deadline, at most every 100 ms.
    auto now = Clock::now();
    auto next = now + std::chrono::milliseconds(100);
    for (const auto& [fd, c] : m_waiting) next = std::min(next, c->deadline);
    int timeout = static_cast<int>(std::max<long long>(
        0, std::chrono::ceil<std::chrono::milliseconds>(next - now).count()));
    int n = ::epoll_wait(m_epoll_fd, events.data(), static_cast<int>(events.size()), timeout);
    for (int i = 0; i < n; ++i) {
      int fd = events[static_cast<std::size_t>(i)].data.fd;
      if (fd == m_listen_fd) {
        accept_all();
      } else if (fd == m_wake_fd) {
        std::uint64_t count = 0;
        [[maybe_unused]] auto r = ::read(m_wake_fd, &count, sizeof count);
        std::vector<std::unique_ptr<Connection>> back;
        {
          std::lock_guard lock(m_mutex);
          back.swap(m_returned);
        }
        for (auto& c : back) wait_for_request(std::move(c));
      } else if (auto it = m_waiting.find(fd); it != m_waiting.end()) {
        on_event(*it->second);
      }
    }
    now = Clock::now();
    std::vector<int> late;
    for (const auto& [fd, c] : m_waiting) {
      if (c->deadline <= now) late.push_back(fd);
    }
    for (int fd : late) {
      auto it = m_waiting.find(fd);
      std::unique_ptr<Connection> c = std::move(it->second);
      forget(fd);
      if (c->request_started && c->handshaken) {
        close_with(std::move(c), 408, "Request Timeout",
                   "the request did not arrive within " + std::to_string(m_limits.request_time.count()) + " ms");
      } else {
        --m_open;  // an idle keep-alive connection, or a TLS handshake that never finished: just close
      }
    }
  }
}

void HttpListener::Impl::accept_all() {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t length = sizeof peer;
    int fd = ::accept4(m_listen_fd, reinterpret_cast<sockaddr*>(&peer), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) spdlog::warn("{}: accept: {}", m_what, std::strerror(errno));
      return;
    }
    if (m_open >= m_limits.max_connections) {
      // Full: refuse at once rather than queue work nobody can serve soon.
      static constexpr std::string_view k_busy =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n";
      if (m_tls == nullptr) [[maybe_unused]] auto sent = ::send(fd, k_busy.data(), k_busy.size(), MSG_NOSIGNAL);
      ::close(fd);
      continue;
    }
    ++m_open;
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // headers and body go in separate writes
    address_of(peer, c->peer_ip, c->peer_port);
    sockaddr_storage local{};
    length = sizeof local;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length);
    address_of(local, c->local_ip, c->local_port);
    if (m_tls != nullptr) {
      c->ssl = SSL_new(m_tls);
      SSL_set_fd(c->ssl, fd);
      SSL_set_accept_state(c->ssl);
    } else {
      c->handshaken = true;
    }
    c->request_started = true;
    c->deadline = Clock::now() + m_limits.request_time;
    epoll_event e{};
    e.events = EPOLLIN;
    e.data.fd = fd;
    ::epoll_ctl(m_epoll_fd, EPOLL_CTL_ADD, fd, &e);
    m_waiting.emplace(fd, std::move(c));
  }
}

void HttpListener::Impl::wait_for_request(std::unique_ptr<Connection> c) {
  int fd = c->fd;
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.fd = fd;
  ::epoll_ctl(m_epoll_fd, EPOLL_CTL_ADD, fd, &e);
  Connection& ref = *c;
  m_waiting.emplace(fd, std::move(c));
  // What is already buffered (pipelined bytes, or TLS records OpenSSL holds) wakes no epoll.
  on_event(ref);
}

void HttpListener::Impl::forget(int fd) {
  ::epoll_ctl(m_epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
  m_waiting.erase(fd);
}

void HttpListener::Impl::close_with(std::unique_ptr<Connection> c, int status, const std::string& reason,
                                    const std::string& message) {
  // Best effort, never blocking: the event thread waits for nobody.
  std::string answer = canned_answer(status, reason, message);
  if (c->ssl != nullptr) {
    [[maybe_unused]] int n = SSL_write(c->ssl, answer.data(), static_cast<int>(answer.size()));
  } else {
    [[maybe_unused]] auto n = ::send(c->fd, answer.data(), answer.size(), MSG_NOSIGNAL);
  }
  --m_open;
}

void HttpListener::Impl::on_event(Connection& c) {
  int fd = c.fd;
  auto drop = [&] {
    std::unique_ptr<Connection> gone = std::move(m_waiting.at(fd));
    forget(fd);
    --m_open;
  };
  if (!c.handshaken) {
    ERR_clear_error();
    int r = SSL_do_handshake(c.ssl);
    if (r != 1) {
      int e = SSL_get_error(c.ssl, r);
      if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) return drop();  // e.g. no client certificate
      epoll_event ev{};
      ev.events = e == SSL_ERROR_WANT_WRITE ? EPOLLOUT : EPOLLIN;
      ev.data.fd = fd;
      ::epoll_ctl(m_epoll_fd, EPOLL_CTL_MOD, fd, &ev);
      return;
    }
    c.handshaken = true;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(m_epoll_fd, EPOLL_CTL_MOD, fd, &ev);
  }
  // Read everything there is, up to the header limit (a little more: pipelined requests).
  char buffer[16384];
  bool closed = false;
  while (c.in.size() < 2 * m_limits.max_header_bytes) {
    ssize_t n;
    if (c.ssl != nullptr) {
      ERR_clear_error();
      int r = SSL_read(c.ssl, buffer, sizeof buffer);
      if (r > 0) {
        n = r;
      } else {
        int e = SSL_get_error(c.ssl, r);
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) break;
        closed = true;
        break;
      }
    } else {
      n = ::recv(fd, buffer, sizeof buffer, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      if (n <= 0) {
        closed = true;
        break;
      }
    }
    if (!c.request_started) {
      c.request_started = true;
      c.deadline = Clock::now() + m_limits.request_time;
    }
    c.in.append(buffer, static_cast<std::size_t>(n));
  }
  Verdict verdict = judge_request(c.in, m_limits.max_header_bytes);
  if (verdict.next == Verdict::wait) {
    if (closed) return drop();
    return;
  }
  std::unique_ptr<Connection> owned = std::move(m_waiting.at(fd));
  forget(fd);
  if (verdict.next == Verdict::refuse) return close_with(std::move(owned), verdict.status, verdict.reason, verdict.message);
  {
    std::lock_guard lock(m_mutex);
    m_busy.insert(fd);
    m_ready.push_back(std::move(owned));
  }
  m_work.notify_one();
}

void HttpListener::Impl::serve() {
  for (;;) {
    std::unique_ptr<Connection> c;
    {
      std::unique_lock lock(m_mutex);
      m_work.wait(lock, [this] { return m_stopping || !m_ready.empty(); });
      if (m_stopping) return;
      c = std::move(m_ready.front());
      m_ready.pop_front();
    }
    answer_all(std::move(c));
  }
}

void HttpListener::Impl::answer_all(std::unique_ptr<Connection> c) {
  auto finish = [&](bool keep) {
    {
      std::lock_guard lock(m_mutex);
      m_busy.erase(c->fd);
      if (keep && !m_stopping) {
        m_returned.push_back(std::move(c));
      }
    }
    if (c) {
      --m_open;
      c.reset();
      return;
    }
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(m_wake_fd, &one, sizeof one);
  };
  SocketSink sink(*c, m_limits.write_time);
  Endpoints ends{c->peer_ip, c->local_ip, c->peer_port, c->local_port, c->fd};
  if (!answer_requests(m_router, c->in, c->answered, ends, sink)) return finish(false);
  c->request_started = !c->in.empty();
  c->deadline = Clock::now() + (c->request_started ? m_limits.request_time : m_limits.idle_time);
  finish(true);
}

HttpListener::HttpListener(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
HttpListener::~HttpListener() = default;
int HttpListener::port() const { return m_impl->m_port; }

Expected<std::unique_ptr<HttpListener>> HttpListener::start(const std::string& listen, const std::string& what,
                                                            const HttpTls& tls, const HttpLimits& limits,
                                                            const std::function<void(httplib::Server&)>& routes) {
  auto address = parse_listen_address(listen, what);
  if (!address) return address.error();
  auto impl = std::make_unique<Impl>(what, limits);
  // A kept-alive connection waits this long for its next request (cpp-httplib announces it).
  impl->m_router.set_keep_alive_timeout(std::max<time_t>(1, limits.idle_time.count() / 1000));
  impl->m_router.set_keep_alive_max_count(k_max_requests_per_connection);
  routes(impl->m_router);
  if (auto opened = impl->open(*address, tls); !opened) return opened.error();
  impl->run();
  return std::unique_ptr<HttpListener>(new HttpListener(std::move(impl)));
}

}  // namespace kcache::server
