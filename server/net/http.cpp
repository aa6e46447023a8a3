#include "net/http.hpp"

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
#include "net/http_request.hpp"
#include "net/admission.hpp"

namespace kcache::server {
namespace {

using Clock = std::chrono::steady_clock;

// Answers not yet sent, in order: copies of what cpp-httplib wrote (status line, headers, small
// bodies), and references to shared bodies (set_shared_content), sent from where they lie.
class Output {
 public:
  void copy(const char* data, std::size_t size) {
    if (m_pieces.empty() || m_pieces.back().owner) m_pieces.emplace_back();
    m_pieces.back().own.append(data, size);
    m_bytes += size;
  }
  void share(const std::shared_ptr<const void>& owner, std::string_view bytes) {
    m_pieces.push_back(Piece{{}, owner, bytes});
    m_bytes += bytes.size();
  }
  bool empty() const { return m_pieces.empty(); }
  std::size_t bytes() const { return m_bytes; }

  // Where the answer being written starts, and forgetting everything after it.
  struct Mark {
    std::size_t pieces = 0, last_size = 0, bytes = 0;
  };
  Mark mark() const {
    return {m_pieces.size(), m_pieces.empty() ? 0 : m_pieces.back().size(), m_bytes};
  }
  void drop_after(const Mark& m) {
    m_pieces.resize(m.pieces);
    if (!m_pieces.empty() && !m_pieces.back().owner) m_pieces.back().own.resize(m.last_size);
    m_bytes = m.bytes;
  }

  // The unsent bytes, piece by piece: at most `max` of them into `out`.
  std::size_t views(std::string_view* out, std::size_t max) const {
    std::size_t n = 0;
    for (const Piece& p : m_pieces) {
      if (n == max) break;
      std::string_view v = p.view();
      if (n == 0) v.remove_prefix(m_sent);
      out[n++] = v;
    }
    return n;
  }
  void consume(std::size_t size) {
    m_bytes -= size;
    while (size > 0) {
      std::size_t left = m_pieces.front().size() - m_sent;
      if (size < left) {
        m_sent += size;
        return;
      }
      size -= left;
      m_sent = 0;
      m_pieces.pop_front();
    }
  }
  void clear() {
    m_pieces.clear();
    m_sent = 0;
    m_bytes = 0;
  }

 private:
  struct Piece {
    std::string own;
    std::shared_ptr<const void> owner;  // set: a shared body, `shared` in it
    std::string_view shared;
    std::string_view view() const { return owner ? shared : std::string_view(own); }
    std::size_t size() const { return view().size(); }
  };
  std::deque<Piece> m_pieces;
  std::size_t m_sent = 0;  // of the first piece
  std::size_t m_bytes = 0;
};

struct Loop;

struct Connection {
  int fd = -1;
  SSL* ssl = nullptr;
  bool handshaken = false;
  std::string in;  // received and not yet answered: the request being read, and any pipelined after it
  Output out;      // answered and not yet sent
  bool close_when_sent = false;
  bool peer_closed = false;
  Clock::time_point deadline;
  bool request_started = false;  // deadline is the request's, not the idle wait's
  std::uint32_t events = 0;      // what epoll watches for it
  std::size_t answered = 0;
  std::string peer_ip, local_ip;
  int peer_port = 0, local_port = 0;
  Loop* loop = nullptr;  // the event thread it belongs to

  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() {
    if (ssl != nullptr) SSL_free(ssl);
    if (fd >= 0) ::close(fd);
  }
};

// One event thread: its epoll, its connections, and the connections the pool gives back to it.
struct Loop {
  int epoll_fd = -1, wake_fd = -1;
  std::map<int, std::unique_ptr<Connection>> connections;  // its thread only
  std::mutex mutex;                                        // guards returned
  std::vector<std::unique_ptr<Connection>> returned;  // by the pool, or new from the accepting thread
  std::thread thread;

  void wake() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }
  ~Loop() {
    for (int fd : {epoll_fd, wake_fd}) {
      if (fd >= 0) ::close(fd);
    }
  }
};

// Sends what `c.out` holds without blocking. sent: all of it; blocked: the socket is full (or
// TLS needs to read), wait for `wanted`; failed: close the connection.
enum class Sent { sent, blocked, failed };
Sent send_some(Connection& c, std::uint32_t& wanted) {
  while (!c.out.empty()) {
    std::string_view views[64];
    std::size_t n = c.out.views(views, std::size(views));
    if (c.ssl != nullptr) {
      ERR_clear_error();
      std::size_t written = 0;
      int r = SSL_write_ex(c.ssl, views[0].data(), views[0].size(), &written);
      if (r == 1) {
        c.out.consume(written);
        continue;
      }
      int e = SSL_get_error(c.ssl, r);
      if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
        wanted = e == SSL_ERROR_WANT_WRITE ? EPOLLOUT : EPOLLIN;
        return Sent::blocked;
      }
      return Sent::failed;
    }
    iovec iov[std::size(views)];
    for (std::size_t i = 0; i < n; ++i) iov[i] = {const_cast<char*>(views[i].data()), views[i].size()};
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = n;
    ssize_t r = ::sendmsg(c.fd, &message, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r > 0) {
      c.out.consume(static_cast<std::size_t>(r));
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wanted = EPOLLOUT;
      return Sent::blocked;
    }
    return Sent::failed;
  }
  return Sent::sent;
}

// An event thread's answers: kept in the connection's Output and sent from the event loop as the
// socket takes them.
class KeptSink final : public AnswerSink {
 public:
  explicit KeptSink(Output& out) : m_out(out) {}
  void start_answer() override { m_mark = m_out.mark(); }
  bool write(const char* ptr, std::size_t size) override {
    m_out.copy(ptr, size);
    return true;
  }
  bool write_shared(const std::shared_ptr<const void>& owner, std::string_view bytes) override {
    m_out.share(owner, bytes);
    return true;
  }
  void drop_answer() override { m_out.drop_after(m_mark); }
  // Pipelined requests wait while this much is unsent: what a connection holds stays bounded.
  bool full() const override { return m_out.bytes() >= (256u << 10); }

 private:
  Output& m_out;
  Output::Mark m_mark;
};

// A pool thread's answers go to the connection's socket (through TLS when it has it), each within
// its own deadline from start_answer(): a pool thread waits for a slow reader no longer than that.
class SocketSink final : public AnswerSink {
 public:
  SocketSink(Connection& c, std::chrono::milliseconds write_time) : m_c(c), m_write_time(write_time) {}

  void start_answer() override { m_deadline = Clock::now() + m_write_time; }
  bool write(const char* ptr, std::size_t size) override {
    m_c.out.copy(ptr, size);
    return flush();
  }
  bool write_shared(const std::shared_ptr<const void>& owner, std::string_view bytes) override {
    m_c.out.share(owner, bytes);
    return flush();
  }
  // Sends everything the connection holds (answers the event thread kept, then this one's).
  bool flush() {
    for (;;) {
      std::uint32_t wanted = 0;
      Sent s = send_some(m_c, wanted);
      if (s == Sent::sent) return true;
      if (s == Sent::failed || !await(wanted == EPOLLOUT ? POLLOUT : POLLIN)) return false;
    }
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
  Clock::time_point m_deadline = Clock::now() + m_write_time;
};

}  // namespace

class HttpListener::Impl {
 public:
  Impl(std::string what, HttpLimits limits, net::FdBudget& fds)
      : m_what(std::move(what)), m_limits(limits), m_fds(fds), m_peers(limits.max_per_peer), m_accepter(m_what) {}
  ~Impl() { stop(); }

  Expected<void> open(const ListenAddress& address, const HttpTls& tls);
  void run();
  void stop();

  Router m_router;
  int m_port = 0;

 private:
  // Event threads.
  void loop(Loop& l);
  void accept_all(Loop& l);
  void on_event(Loop& l, Connection& c);
  // Reads, answers and sends what it can for `c` (in l.connections) without blocking, and then
  // watches it for what it waits for; or closes it, or passes it to the pool.
  void advance(Loop& l, Connection& c);
  void adopt(Loop& l, std::unique_ptr<Connection> c);  // a new or given-back connection
  void watch(Loop& l, Connection& c, std::uint32_t events);
  std::unique_ptr<Connection> release(Loop& l, Connection& c);  // out of the loop's hands
  void close_with(std::unique_ptr<Connection> c, int status, const std::string& reason, const std::string& message);
  void close(std::unique_ptr<Connection> c);
  // Pool threads.
  void serve();
  void answer_on_pool(std::unique_ptr<Connection> c);

  bool make_room(Loop& l);  // closes the accepting loop's connection waiting nearest its deadline

  const std::string m_what;
  const HttpLimits m_limits;
  net::FdBudget& m_fds;
  net::PeerCounts m_peers;
  net::Accepter m_accepter;  // the first event thread's
  net::SslCtx m_tls;
  int m_listen_fd = -1;
  std::atomic<std::size_t> m_open{0};  // connections, wherever they are
  std::atomic<bool> m_stopping{false};
  std::vector<std::unique_ptr<Loop>> m_loops;
  std::size_t m_next_loop = 0;  // the first event thread's: whose turn the next connection is

  std::mutex m_mutex;  // guards everything below
  std::condition_variable m_work;
  std::deque<std::unique_ptr<Connection>> m_ready;  // requests that need a wait, for the pool
  std::set<int> m_busy;                             // fds a pool thread is answering on
  std::vector<std::thread> m_pool;
};

Expected<void> HttpListener::Impl::open(const ListenAddress& address, const HttpTls& tls) {
  if (tls.enabled()) {
    auto ctx = net::server_tls_context(tls, m_what, /*alpn_h2=*/false);
    if (!ctx) return ctx.error();
    m_tls = std::move(*ctx);
  }
  auto fd = net::listen_tcp(address.host, address.port, m_limits.backlog, m_what, m_port);
  if (!fd) return fd.error();
  m_listen_fd = *fd;

  std::size_t loops = m_limits.event_threads;
  if (loops == 0) loops = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, 4);
  for (std::size_t i = 0; i < loops; ++i) {
    auto l = std::make_unique<Loop>();
    l->epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
    l->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (l->epoll_fd < 0 || l->wake_fd < 0) return make_error(ErrorCode::k_internal, m_what + ": epoll: " + std::strerror(errno));
    // The first event thread accepts, in the order connections arrive (so the connection cap
    // refuses the newest), and deals them out to all of them in turn.
    epoll_event e{};
    if (i == 0) {
      e.events = EPOLLIN;
      e.data.fd = m_listen_fd;
      ::epoll_ctl(l->epoll_fd, EPOLL_CTL_ADD, m_listen_fd, &e);
    }
    e.events = EPOLLIN;
    e.data.fd = l->wake_fd;
    ::epoll_ctl(l->epoll_fd, EPOLL_CTL_ADD, l->wake_fd, &e);
    m_loops.push_back(std::move(l));
  }
  return {};
}

void HttpListener::Impl::run() {
  for (auto& l : m_loops) l->thread = std::thread([this, l = l.get()] { loop(*l); });
  for (std::size_t i = 0; i < std::max<std::size_t>(1, m_limits.threads); ++i) m_pool.emplace_back([this] { serve(); });
}

void HttpListener::Impl::stop() {
  {
    std::lock_guard lock(m_mutex);
    if (m_stopping && m_pool.empty()) return;
    m_stopping = true;
    // A pool thread may be waiting for a slow reader: cut it off rather than wait out the deadline.
    for (int fd : m_busy) ::shutdown(fd, SHUT_RDWR);
  }
  m_work.notify_all();
  for (auto& l : m_loops) {
    if (l->wake_fd >= 0) l->wake();
  }
  for (auto& l : m_loops) {
    if (l->thread.joinable()) l->thread.join();
  }
  for (std::thread& t : m_pool) {
    if (t.joinable()) t.join();
  }
  m_pool.clear();
  m_ready.clear();
  m_loops.clear();
  if (m_listen_fd >= 0) ::close(m_listen_fd);
  m_listen_fd = -1;
  m_tls.reset();
}

void HttpListener::Impl::loop(Loop& l) {
  become_event_thread();
  std::vector<epoll_event> events(128);
  while (!m_stopping) {
    // Wake for the nearest deadline, at most every 100 ms.
    auto now = Clock::now();
    auto next = now + std::chrono::milliseconds(100);
    for (const auto& [fd, c] : l.connections) next = std::min(next, c->deadline);
    int timeout = static_cast<int>(std::max<long long>(
        0, std::chrono::ceil<std::chrono::milliseconds>(next - now).count()));
    int n = ::epoll_wait(l.epoll_fd, events.data(), static_cast<int>(events.size()), timeout);
    for (int i = 0; i < n && !m_stopping; ++i) {
      int fd = events[static_cast<std::size_t>(i)].data.fd;
      if (fd == m_listen_fd) {
        accept_all(l);
      } else if (fd == l.wake_fd) {
        std::uint64_t count = 0;
        [[maybe_unused]] auto r = ::read(l.wake_fd, &count, sizeof count);
        std::vector<std::unique_ptr<Connection>> back;
        {
          std::lock_guard lock(l.mutex);
          back.swap(l.returned);
        }
        for (auto& c : back) adopt(l, std::move(c));
      } else if (auto it = l.connections.find(fd); it != l.connections.end()) {
        on_event(l, *it->second);
      }
    }
    now = Clock::now();
    std::vector<Connection*> late;
    for (const auto& [fd, c] : l.connections) {
      if (c->deadline <= now) late.push_back(c.get());
    }
    for (Connection* c : late) {
      auto owned = release(l, *c);
      if (owned->out.empty() && owned->request_started && owned->handshaken) {
        close_with(std::move(owned), 408, "Request Timeout",
                   "the request did not arrive within " + std::to_string(m_limits.request_time.count()) + " ms");
      } else {
        // An idle keep-alive connection, a TLS handshake that never finished, or a reader that
        // did not take its answer within the write time: just close.
        close(std::move(owned));
      }
    }
  }
  l.connections.clear();
  std::lock_guard lock(l.mutex);
  l.returned.clear();
}

void HttpListener::Impl::accept_all(Loop& l) {
  for (;;) {
    sockaddr_storage peer{};
    int fd = m_accepter.accept(m_listen_fd, peer);
    if (fd < 0) return;
    std::string peer_ip;
    int peer_port = 0;
    net::peer_address(peer, peer_ip, peer_port);
    bool room = (m_open < m_limits.max_connections || make_room(l)) && (m_fds.take(1) || (make_room(l) && m_fds.take(1)));
    if (!room || !m_peers.add(peer_ip)) {
      if (room) m_fds.give_back(1);
      // Full, or this peer has its share: refuse at once rather than queue work nobody can serve soon.
      static constexpr std::string_view k_busy =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nRetry-After: 1\r\nConnection: close\r\n\r\n";
      if (!m_tls) [[maybe_unused]] auto sent = ::send(fd, k_busy.data(), k_busy.size(), MSG_NOSIGNAL);
      ::close(fd);
      continue;
    }
    ++m_open;
    auto c = std::make_unique<Connection>();
    c->fd = fd;
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // an answer goes in one write; send it now
    c->peer_ip = std::move(peer_ip);
    c->peer_port = peer_port;
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length);
    net::peer_address(local, c->local_ip, c->local_port);
    if (m_tls) {
      c->ssl = SSL_new(m_tls.get());
      SSL_set_fd(c->ssl, fd);
      SSL_set_accept_state(c->ssl);
    } else {
      c->handshaken = true;
    }
    c->request_started = true;
    c->deadline = Clock::now() + m_limits.request_time;
    Loop& owner = *m_loops[m_next_loop++ % m_loops.size()];
    c->loop = &owner;
    if (&owner == &l) {
      Connection& ref = *c;
      l.connections.emplace(fd, std::move(c));
      watch(l, ref, EPOLLIN);
    } else {
      {
        std::lock_guard lock(owner.mutex);
        owner.returned.push_back(std::move(c));
      }
      owner.wake();
    }
  }
}

void HttpListener::Impl::adopt(Loop& l, std::unique_ptr<Connection> c) {
  Connection& ref = *c;
  ref.events = 0;
  l.connections.emplace(ref.fd, std::move(c));
  // What is already buffered (pipelined bytes, or TLS records OpenSSL holds) wakes no epoll.
  on_event(l, ref);
}

void HttpListener::Impl::watch(Loop& l, Connection& c, std::uint32_t events) {
  if (c.events == events) return;  // no system call for a connection that stays as it was
  epoll_event e{};
  e.events = events;
  e.data.fd = c.fd;
  ::epoll_ctl(l.epoll_fd, c.events == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, c.fd, &e);
  c.events = events;
}

std::unique_ptr<Connection> HttpListener::Impl::release(Loop& l, Connection& c) {
  int fd = c.fd;
  if (c.events != 0) ::epoll_ctl(l.epoll_fd, EPOLL_CTL_DEL, fd, nullptr);
  c.events = 0;
  auto it = l.connections.find(fd);
  std::unique_ptr<Connection> owned = std::move(it->second);
  l.connections.erase(it);
  return owned;
}

void HttpListener::Impl::close(std::unique_ptr<Connection> c) {
  m_peers.remove(c->peer_ip);
  c.reset();
  m_fds.give_back(1);
  --m_open;
}

bool HttpListener::Impl::make_room(Loop& l) {
  Connection* nearest = nullptr;
  for (const auto& [fd, c] : l.connections) {
    if (!c->out.empty()) continue;  // answering: not waiting
    if (nearest == nullptr || c->deadline < nearest->deadline) nearest = c.get();
  }
  if (nearest == nullptr) return false;
  close(release(l, *nearest));
  return true;
}

void HttpListener::Impl::close_with(std::unique_ptr<Connection> c, int status, const std::string& reason,
                                    const std::string& message) {
  // Best effort, never blocking: the event thread waits for nobody.
  std::string answer = canned_answer(status, reason, message);
  if (c->ssl != nullptr) {
    [[maybe_unused]] int n = SSL_write(c->ssl, answer.data(), static_cast<int>(answer.size()));
  } else {
    [[maybe_unused]] auto n = ::send(c->fd, answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  close(std::move(c));
}

void HttpListener::Impl::on_event(Loop& l, Connection& c) {
  if (!c.handshaken) {
    ERR_clear_error();
    int r = SSL_do_handshake(c.ssl);
    if (r != 1) {
      int e = SSL_get_error(c.ssl, r);
      if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) return close(release(l, c));  // e.g. no client certificate
      watch(l, c, e == SSL_ERROR_WANT_WRITE ? EPOLLOUT : EPOLLIN);
      return;
    }
    c.handshaken = true;
  }
  // Answers still going out are sent first; requests behind them wait in the socket.
  if (c.out.empty() && !c.close_when_sent) {
    // Read everything there is, up to the header limit (a little more: pipelined requests).
    char buffer[16384];
    while (c.in.size() < 2 * m_limits.max_header_bytes) {
      ssize_t n;
      if (c.ssl != nullptr) {
        ERR_clear_error();
        int r = SSL_read(c.ssl, buffer, sizeof buffer);
        if (r > 0) {
          n = r;
        } else {
          int e = SSL_get_error(c.ssl, r);
          if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) c.peer_closed = true;
          break;
        }
      } else {
        n = ::recv(c.fd, buffer, sizeof buffer, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n <= 0) {
          c.peer_closed = true;
          break;
        }
      }
      if (!c.request_started) {
        c.request_started = true;
        c.deadline = Clock::now() + m_limits.request_time;
      }
      c.in.append(buffer, static_cast<std::size_t>(n));
      // A short read took all there was: epoll (level-triggered) says when more comes, so one
      // more recv here would only answer EAGAIN, a system call per request for nothing.
      if (c.ssl == nullptr && static_cast<std::size_t>(n) < sizeof buffer) break;
    }
  }
  advance(l, c);
}

void HttpListener::Impl::advance(Loop& l, Connection& c) {
  bool answers_sent = false;
  for (;;) {
    if (!c.out.empty()) {
      std::uint32_t wanted = 0;
      Sent s = send_some(c, wanted);
      if (s == Sent::failed) return close(release(l, c));
      if (s == Sent::blocked) return watch(l, c, wanted);
      answers_sent = true;
    }
    if (c.close_when_sent) return close(release(l, c));
    Verdict verdict = judge_request(c.in, m_limits.max_header_bytes);
    if (verdict.next == Verdict::refuse) {
      return close_with(release(l, c), verdict.status, verdict.reason, verdict.message);
    }
    if (verdict.next == Verdict::wait) {
      if (c.peer_closed) return close(release(l, c));
      if (answers_sent) {
        // The next request's deadline runs from its first byte, if any is here already (a
        // request trickled in byte by byte keeps the deadline it started with otherwise).
        c.request_started = !c.in.empty();
        c.deadline = Clock::now() + (c.request_started ? m_limits.request_time : m_limits.idle_time);
      }
      return watch(l, c, EPOLLIN);
    }
    KeptSink sink(c.out);
    Endpoints ends{c.peer_ip, c.local_ip, c.peer_port, c.local_port, c.fd};
    Next next = answer_requests(m_router, c.in, c.answered, ends, sink);
    if (next == Next::defer) {
      auto owned = release(l, c);
      std::lock_guard lock(m_mutex);
      m_busy.insert(owned->fd);
      m_ready.push_back(std::move(owned));
      m_work.notify_one();
      return;
    }
    c.close_when_sent = next == Next::close;
    // The answers' deadline: a reader that does not take them within the write time is cut off.
    c.deadline = Clock::now() + m_limits.write_time;
  }
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
    answer_on_pool(std::move(c));
  }
}

void HttpListener::Impl::answer_on_pool(std::unique_ptr<Connection> c) {
  int fd = c->fd;
  SocketSink sink(*c, m_limits.write_time);
  Endpoints ends{c->peer_ip, c->local_ip, c->peer_port, c->local_port, c->fd};
  // The answers the event thread kept go first, then the one it passed here (the pool may wait:
  // nothing defers), then any complete requests behind it.
  bool keep = sink.flush() && answer_requests(m_router, c->in, c->answered, ends, sink) == Next::more;
  {
    std::lock_guard lock(m_mutex);
    m_busy.erase(fd);
    keep = keep && !m_stopping;
  }
  if (!keep) return close(std::move(c));
  c->request_started = !c->in.empty();
  c->deadline = Clock::now() + (c->request_started ? m_limits.request_time : m_limits.idle_time);
  Loop& l = *c->loop;
  {
    std::lock_guard lock(l.mutex);
    l.returned.push_back(std::move(c));
  }
  l.wake();
}

HttpListener::HttpListener(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
HttpListener::~HttpListener() = default;
int HttpListener::port() const { return m_impl->m_port; }

Expected<std::unique_ptr<HttpListener>> HttpListener::start(const std::string& listen, const std::string& what,
                                                            const HttpTls& tls, const HttpLimits& limits,
                                                            net::FdBudget& fds,
                                                            const std::function<void(Router&)>& routes) {
  auto address = parse_listen_address(listen, what);
  if (!address) return address.error();
  auto impl = std::make_unique<Impl>(what, limits, fds);
  // A kept-alive connection waits this long for its next request (cpp-httplib announces it).
  impl->m_router.set_keep_alive_timeout(std::max<time_t>(1, limits.idle_time.count() / 1000));
  impl->m_router.set_keep_alive_max_count(k_max_requests_per_connection);
  routes(impl->m_router);
  if (auto opened = impl->open(*address, tls); !opened) return opened.error();
  impl->run();
  return std::unique_ptr<HttpListener>(new HttpListener(std::move(impl)));
}

}  // namespace kcache::server
