#include "net/grpc_gate.hpp"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <signal.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "net/admission.hpp"
#include "net/grpc_calls.hpp"
#include "kcache/process.hpp"
#include "net/h2_frames.hpp"

namespace kcache::server::net {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t k_fds_per_link = 3;  // the client's socket, the gate's Unix end, gRPC's end
constexpr std::size_t k_read_chunk = 64 << 10;
constexpr auto k_close_flush_time = std::chrono::seconds(1);  // for GOAWAY and a server's last frames
constexpr auto k_sweep_every = std::chrono::milliseconds(100);
// await_replies: how long the connections stay quiet (no reply under way, nothing unread or
// unsent) before the replies are taken to be out, and how often the event thread looks then.
constexpr auto k_replies_quiet = std::chrono::milliseconds(20);
constexpr auto k_replies_look_every = std::chrono::milliseconds(5);
constexpr std::size_t k_max_penalized = 65536;
constexpr std::string_view k_peer_tag = "kcached-gate ";

// Bytes waiting to be written, first in first out.
class Pending {
 public:
  std::size_t size() const { return m_bytes.size() - m_sent; }
  bool empty() const { return size() == 0; }
  std::string_view view() const { return std::string_view(m_bytes).substr(m_sent); }
  void append(std::string_view b) { m_bytes.append(b); }
  void consume(std::size_t n) {
    m_sent += n;
    if (m_sent == m_bytes.size()) {
      m_bytes.clear();
      m_sent = 0;
    } else if (m_sent > (1u << 16) && m_sent * 2 > m_bytes.size()) {
      m_bytes.erase(0, m_sent);
      m_sent = 0;
    }
  }
  void keep_first(std::size_t n) { m_bytes.resize(m_sent + std::min(n, size())); }
  void clear() {
    m_bytes.clear();
    m_sent = 0;
  }

 private:
  std::string m_bytes;
  std::size_t m_sent = 0;
};

struct Link {
  std::uint64_t id = 0;
  int client = -1, upstream = -1;
  SSL* ssl = nullptr;
  bool tls_done = false;
  bool ssl_wants_write = false;
  bool h2_ready = false;    // preface and first SETTINGS seen: the handshake deadline is lifted
  bool closing = false;     // only flushing to_client, then closed
  bool fin_sent = false;    // closing, and to_client flushed: FIN sent, reading the client until it closes
  Pending to_upstream, to_client;
  H2FrameReader from_client{true}, from_server{false};
  // Streams gRPC has begun to answer (a frame of it) and not yet ended (END_STREAM, or a reset by
  // either side): replies under way. Only gRPC's frames add to it, and gRPC caps a connection's
  // streams.
  std::unordered_set<std::uint32_t> replying;
  std::unique_ptr<GrpcCallWatcher> calls;  // where the gate watches message sizes
  std::uint32_t last_stream = 0;
  double tokens = 0;
  bool probation = false;             // admitted while its address was penalized: an eighth of the budget
  std::uint64_t header_block = 0;     // bytes of the header block being received
  bool in_header_block = false;       // a HEADERS without END_HEADERS, CONTINUATIONs to come
  Clock::time_point refilled, accepted, deadline;
  std::string ip;
  int port = 0;
  std::uint32_t client_events = 0, upstream_events = 0;

  ~Link() {
    if (ssl != nullptr) SSL_free(ssl);
    for (int fd : {client, upstream}) {
      if (fd >= 0) ::close(fd);
    }
  }
};

// One log line when refusals start, one when they end: a flood of refusals writes two lines.
class RefusalEpisode {
 public:
  explicit RefusalEpisode(std::string what) : m_what(std::move(what)) {}
  void refused(const std::string& why) {
    if (m_refused++ == 0) spdlog::warn("{}: refusing new connections: {}", m_what, why);
  }
  void admitted() {
    if (m_refused == 0) return;
    spdlog::info("{}: admitting again; {} connections were refused", m_what, m_refused);
    m_refused = 0;
  }

 private:
  const std::string m_what;
  std::size_t m_refused = 0;
};

std::string grpc_style_address(const std::string& ip, int port) {
  return ip.find(':') != std::string::npos ? "ipv6:[" + ip + "]:" + std::to_string(port)
                                           : "ipv4:" + ip + ":" + std::to_string(port);
}

// Whether a frame makes the server work without carrying a request.
bool carries_no_request(const H2Frame& f) {
  if (f.is(H2Type::rst_stream) || f.is(H2Type::priority) || f.is(H2Type::continuation)) return true;
  if (f.is(H2Type::ping) || f.is(H2Type::settings)) return (f.flags & k_h2_flag_ack) == 0;
  if (f.is(H2Type::data)) return f.length == 0 && (f.flags & k_h2_flag_end_stream) == 0;
  return false;
}

constexpr std::string_view k_folder_prefix = "/tmp/kcached-";

// The private folders (k_folder_prefix PID-XXXXXX) of kcached processes that are gone (killed
// before they could remove theirs), this user's only. A live process's folder is never touched:
// its PID still answers kill(pid, 0).
void remove_folders_of_dead_gates() { remove_folders_of_dead_processes("/tmp", k_folder_prefix.substr(5)); }

}  // namespace

class GrpcGate::Impl {
 public:
  Impl(std::string what, const GateLimits& limits, FdBudget& budget)
      : m_what(std::move(what)), m_limits(limits), m_budget(budget), m_peers(limits.max_per_peer), m_accepter(m_what),
        m_refusals(m_what) {}
  ~Impl() { stop(); }

  Expected<void> open(const std::string& host, int port, const TlsFiles& tls);
  void run() { m_thread = std::thread([this] { loop(); }); }
  void stop();

  std::string m_what;
  GateLimits m_limits;
  FdBudget& m_budget;
  int m_port = 0;
  std::filesystem::path m_folder, m_socket;
  std::atomic<bool> m_stop_accepting{false};
  // drain's: set by the caller, then `m_drained` by the event thread once no link holds bytes
  // from gRPC; m_drain_mutex guards m_drained.
  std::atomic<bool> m_draining{false};
  std::mutex m_drain_mutex;
  std::condition_variable m_drain_done;
  bool m_drained = false;
  // await_replies's, the same way: `m_replies_out` once the connections have been quiet
  // since `m_quiet_since` for k_replies_quiet (the event thread's own).
  std::atomic<bool> m_awaiting{false};
  bool m_replies_out = false;
  std::optional<Clock::time_point> m_quiet_since;

  void wake() {
    std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(m_wake_fd, &one, sizeof one);
  }

 private:
  void loop();
  void accept_all();
  bool make_room();  // evicts the oldest link still in its handshake
  void admit(int fd, const std::string& ip, int port, bool probation = false);
  void admit_held();  // the connections held for a penalized address whose turn has come
  void pump(Link& l);
  bool read_client(Link& l);    // false: the link is gone
  bool read_upstream(Link& l);  // false: the link is closing or gone
  bool inspect(Link& l, std::string_view bytes);
  bool connect_upstream(Link& l);
  bool write_client(Link& l);  // false: the client is gone
  void cut(Link& l, const std::string& why);
  void begin_closing(Link& l);
  void linger(Link& l);
  void watch(Link& l);
  void close(Link& l);
  void sweep();
  void note_drained();
  void note_replies_out();
  void tell_waiters(bool& condition);  // sets a waiter's condition (m_drain_mutex) and wakes them
  // The penalty of a cut address, while it lasts; null otherwise.
  struct Penalty {
    Clock::time_point until;
    Clock::time_point next_admit;  // its next new connection is admitted then, not before
    std::size_t held = 0;          // connections waiting for their turn
    std::size_t cuts = 0;          // connections cut while it lasted (logged when it ends)
  };
  Penalty* penalty_of(const std::string& ip, Clock::time_point now);
  struct Held {
    int fd;
    std::string ip;
    int port;
  };

  PeerCounts m_peers;
  Accepter m_accepter;
  RefusalEpisode m_refusals;
  SslCtx m_tls;
  int m_listen_fd = -1, m_epoll_fd = -1, m_wake_fd = -1;
  std::atomic<bool> m_stopping{false};
  std::thread m_thread;
  std::uint64_t m_next_id = 1;
  std::unordered_map<std::uint64_t, std::unique_ptr<Link>> m_links;  // the event thread's alone
  std::map<std::string, Penalty> m_penalized;                       // peer address: its penalty
  std::deque<Held> m_held;                                           // accepted, waiting for their turn
  std::vector<std::uint64_t> m_closed;                               // links closed in this round
};

Expected<void> GrpcGate::Impl::open(const std::string& host, int port, const TlsFiles& tls) {
  if (tls.enabled()) {
    auto ctx = server_tls_context(tls, m_what, /*alpn_h2=*/true);
    if (!ctx) return ctx.error();
    m_tls = std::move(*ctx);
  }
  remove_folders_of_dead_gates();
  std::string pattern = std::string(k_folder_prefix) + std::to_string(::getpid()) + "-XXXXXX";
  std::vector<char> folder(pattern.begin(), pattern.end());
  folder.push_back('\0');
  if (::mkdtemp(folder.data()) == nullptr) {
    return make_error(ErrorCode::k_internal, m_what + ": cannot make a private folder in /tmp: " + std::strerror(errno));
  }
  m_folder = folder.data();
  m_socket = m_folder / "grpc.sock";
  auto fd = listen_tcp(host, port, m_limits.backlog, m_what, m_port);
  if (!fd) return fd.error();
  m_listen_fd = *fd;
  m_epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  m_wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m_epoll_fd < 0 || m_wake_fd < 0) return make_error(ErrorCode::k_internal, m_what + ": epoll: " + std::strerror(errno));
  epoll_event e{};
  e.events = EPOLLIN;
  e.data.u64 = 0;  // the listening socket
  ::epoll_ctl(m_epoll_fd, EPOLL_CTL_ADD, m_listen_fd, &e);
  e.data.u64 = 1;  // the wake-up
  ::epoll_ctl(m_epoll_fd, EPOLL_CTL_ADD, m_wake_fd, &e);
  return {};
}

void GrpcGate::Impl::stop() {
  if (!m_stopping.exchange(true) && m_wake_fd >= 0) wake();
  if (m_thread.joinable()) m_thread.join();
  m_links.clear();
  for (Held& h : m_held) ::close(h.fd);
  m_held.clear();
  for (int* fd : {&m_listen_fd, &m_epoll_fd, &m_wake_fd}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  if (!m_folder.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(m_folder, ec);
    m_folder.clear();
  }
}

// Event data: 0 the listening socket, 1 the wake-up, else (link id << 1) | (1 for its upstream).
void GrpcGate::Impl::loop() {
  std::vector<epoll_event> events(256);
  auto next_sweep = Clock::now() + k_sweep_every;
  while (!m_stopping) {
    if (m_stop_accepting && m_listen_fd >= 0) {
      ::epoll_ctl(m_epoll_fd, EPOLL_CTL_DEL, m_listen_fd, nullptr);
      ::close(m_listen_fd);
      m_listen_fd = -1;
    }
    int timeout = static_cast<int>(std::max<long long>(
        0, std::chrono::ceil<std::chrono::milliseconds>(next_sweep - Clock::now()).count()));
    if (m_awaiting) timeout = std::min(timeout, static_cast<int>(k_replies_look_every.count()));
    int n = ::epoll_wait(m_epoll_fd, events.data(), static_cast<int>(events.size()), timeout);
    for (int i = 0; i < n && !m_stopping; ++i) {
      std::uint64_t tag = events[static_cast<std::size_t>(i)].data.u64;
      if (tag == 0) {
        accept_all();
      } else if (tag == 1) {
        std::uint64_t count = 0;
        [[maybe_unused]] auto r = ::read(m_wake_fd, &count, sizeof count);
      } else if (auto it = m_links.find(tag >> 1); it != m_links.end()) {
        pump(*it->second);
      }
    }
    for (std::uint64_t id : m_closed) m_links.erase(id);
    m_closed.clear();
    if (Clock::now() >= next_sweep) {
      sweep();
      next_sweep = Clock::now() + k_sweep_every;
    }
    if (m_draining) note_drained();
    if (m_awaiting) note_replies_out();
  }
}

// No connection has a reply under way, a frame of gRPC's half read, bytes gRPC wrote that the
// gate has not read, or bytes for its client; for k_replies_quiet.
void GrpcGate::Impl::note_replies_out() {
  bool quiet = std::ranges::none_of(m_links, [](const auto& entry) {
    const Link& l = *entry.second;
    if (l.client < 0) return false;
    if (!l.to_client.empty()) return true;
    if (l.upstream < 0) return false;
    int unread = 0;
    if (::ioctl(l.upstream, FIONREAD, &unread) != 0) unread = 0;
    return !l.replying.empty() || unread > 0 || l.from_server.offset() != l.from_server.boundary();
  });
  auto now = Clock::now();
  if (!quiet) {
    m_quiet_since.reset();
    return;
  }
  if (!m_quiet_since) m_quiet_since = now;
  if (now - *m_quiet_since >= k_replies_quiet) tell_waiters(m_replies_out);
}

// A link holds bytes from gRPC while it has a gRPC end, or is passing on the last of them.
void GrpcGate::Impl::note_drained() {
  bool drained = std::ranges::none_of(m_links, [](const auto& entry) {
    const Link& l = *entry.second;
    return l.client >= 0 && (l.upstream >= 0 || l.closing);
  });
  if (drained) tell_waiters(m_drained);
}

void GrpcGate::Impl::tell_waiters(bool& condition) {
  {
    std::lock_guard lock(m_drain_mutex);
    condition = true;
  }
  m_drain_done.notify_all();
}

GrpcGate::Impl::Penalty* GrpcGate::Impl::penalty_of(const std::string& ip, Clock::time_point now) {
  auto it = m_penalized.find(ip);
  if (it == m_penalized.end()) return nullptr;
  if (it->second.until > now || it->second.held > 0) return &it->second;
  if (it->second.cuts > 1) {
    spdlog::info("{}: {} admitted at full pace again; {} of its connections were cut meanwhile", m_what, ip,
                 it->second.cuts);
  }
  m_penalized.erase(it);
  return nullptr;
}

void GrpcGate::Impl::admit_held() {
  auto now = Clock::now();
  std::deque<Held> waiting;
  for (Held& h : m_held) {
    Penalty* p = penalty_of(h.ip, now);
    if (p != nullptr && p->next_admit > now) {
      waiting.push_back(std::move(h));
      continue;
    }
    if (p != nullptr) {
      --p->held;
      p->next_admit = now + m_limits.admit_spacing;
    }
    admit(h.fd, h.ip, h.port, /*probation=*/p != nullptr);
  }
  m_held = std::move(waiting);
}

void GrpcGate::Impl::accept_all() {
  for (;;) {
    if (m_listen_fd < 0) return;
    sockaddr_storage peer{};
    int fd = m_accepter.accept(m_listen_fd, peer);
    if (fd < 0) return;
    std::string ip;
    int port = 0;
    peer_address(peer, ip, port);
    auto refuse = [&](const std::string& why) {
      m_refusals.refused(why);
      ::close(fd);
    };
    if (m_links.size() - m_closed.size() >= m_limits.max_connections && !make_room()) {
      refuse("all " + std::to_string(m_limits.max_connections) + " connections are in use");
      continue;
    }
    if (!m_budget.take(k_fds_per_link)) {
      if (!make_room() || !m_budget.take(k_fds_per_link)) {
        refuse("the descriptors kcached may give connections are in use (" + std::to_string(m_budget.limit()) + ")");
        continue;
      }
    }
    if (!m_peers.add(ip)) {
      m_budget.give_back(k_fds_per_link);
      refuse(ip + " has " + std::to_string(m_limits.max_per_peer) +
             " connections open, its cap (--max-connections-per-peer)");
      continue;
    }
    m_refusals.admitted();
    auto now = Clock::now();
    if (Penalty* p = penalty_of(ip, now)) {
      // Slowed, not refused: one new connection per admit_spacing, the rest waiting their turn.
      if (p->held > 0 || p->next_admit > now) {
        ++p->held;
        m_held.push_back({fd, ip, port});
        continue;
      }
      p->next_admit = now + m_limits.admit_spacing;
      admit(fd, ip, port, /*probation=*/true);
      continue;
    }
    admit(fd, ip, port);
  }
}

bool GrpcGate::Impl::make_room() {
  Link* oldest = nullptr;
  for (auto& [id, l] : m_links) {
    if (l->h2_ready || l->closing || l->client < 0) continue;
    if (oldest == nullptr || l->accepted < oldest->accepted) oldest = l.get();
  }
  if (oldest == nullptr) return false;
  close(*oldest);
  return true;
}

void GrpcGate::Impl::admit(int fd, const std::string& ip, int port, bool probation) {
  auto link = std::make_unique<Link>();
  Link& l = *link;
  l.id = m_next_id++;
  l.client = fd;
  l.ip = ip;
  l.port = port;
  l.accepted = Clock::now();
  l.deadline = l.accepted + m_limits.handshake_time;
  l.probation = probation;
  l.tokens = probation ? m_limits.frame_burst / 8 : m_limits.frame_burst;
  l.refilled = l.accepted;
  if (m_limits.max_message_bytes > 0 && m_limits.oversized_message) l.calls = std::make_unique<GrpcCallWatcher>();
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (m_tls) {
    l.ssl = SSL_new(m_tls.get());
    SSL_set_fd(l.ssl, fd);
    SSL_set_accept_state(l.ssl);
  } else {
    l.tls_done = true;
  }
  m_links.emplace(l.id, std::move(link));
  pump(l);
}

void GrpcGate::Impl::pump(Link& l) {
  if (l.client < 0) return;  // closed in this round
  if (!l.tls_done) {
    ERR_clear_error();
    int r = SSL_do_handshake(l.ssl);
    if (r != 1) {
      int e = SSL_get_error(l.ssl, r);
      if (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE) return close(l);
      l.ssl_wants_write = e == SSL_ERROR_WANT_WRITE;
      return watch(l);
    }
    l.tls_done = true;
    l.ssl_wants_write = false;
  }
  if (l.fin_sent) return linger(l);
  // Until nothing moves: a read may free room for the other direction, a write room for a read.
  for (int round = 0; round < 16; ++round) {
    std::size_t before = l.to_upstream.size() + l.to_client.size();
    if (!l.closing && !read_client(l)) return;
    if (l.upstream < 0 && !l.closing && l.from_client.preface_done() && !connect_upstream(l)) return close(l);
    if (l.upstream >= 0) {
      while (!l.to_upstream.empty()) {
        ssize_t n = ::send(l.upstream, l.to_upstream.view().data(), l.to_upstream.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
          l.to_upstream.consume(static_cast<std::size_t>(n));
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        begin_closing(l);  // gRPC closed its end
        break;
      }
      if (!l.closing) read_upstream(l);
    }
    if (!write_client(l)) return close(l);
    if (l.closing && l.to_client.empty()) return linger(l);
    if (l.to_upstream.size() + l.to_client.size() == before) break;
  }
  watch(l);
}

bool GrpcGate::Impl::read_client(Link& l) {
  char buffer[k_read_chunk];
  while (l.to_upstream.size() < m_limits.buffer_bytes) {
    std::size_t got = 0;
    if (l.ssl != nullptr) {
      ERR_clear_error();
      int r = SSL_read_ex(l.ssl, buffer, sizeof buffer, &got);
      if (r != 1) {
        int e = SSL_get_error(l.ssl, r);
        if (e == SSL_ERROR_WANT_READ) return true;
        if (e == SSL_ERROR_WANT_WRITE) {
          l.ssl_wants_write = true;
          return true;
        }
        close(l);  // the peer closed, or broke TLS
        return false;
      }
    } else {
      ssize_t n = ::recv(l.client, buffer, sizeof buffer, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      if (n <= 0) {
        close(l);  // the peer closed (an HTTP/2 client half-closes nothing it still needs)
        return false;
      }
      got = static_cast<std::size_t>(n);
    }
    if (!inspect(l, std::string_view(buffer, got))) return false;
    l.to_upstream.append(std::string_view(buffer, got));
  }
  return true;
}

bool GrpcGate::Impl::inspect(Link& l, std::string_view bytes) {
  bool cut_now = false, too_big = false;
  auto on_payload = [&](const H2Frame& f, std::string_view piece) {
    if (!l.calls) return;
    auto declared = l.calls->payload(f, piece);
    if (declared && declared->length > m_limits.max_message_bytes) m_limits.oversized_message(declared->path);
  };
  bool http2 = l.from_client.feed(bytes, [&](const H2Frame& f) {
    if (l.calls) l.calls->frame(f);
    if (f.is(H2Type::headers) && f.stream > l.last_stream) l.last_stream = f.stream;
    if (f.is(H2Type::rst_stream)) l.replying.erase(f.stream);  // the client gave up on the reply
    if (f.is(H2Type::headers) || f.is(H2Type::push_promise)) {
      l.header_block = f.length;
      l.in_header_block = (f.flags & k_h2_flag_end_headers) == 0;
    } else if (f.is(H2Type::continuation)) {
      l.header_block += f.length;
      l.in_header_block = (f.flags & k_h2_flag_end_headers) == 0;
    }
    if ((f.is(H2Type::headers) || f.is(H2Type::continuation)) && l.header_block > m_limits.max_header_block) {
      too_big = true;
      return false;
    }
    if (!l.h2_ready) {
      // RFC 9113 §3.4: the preface's SETTINGS frame comes first.
      if (!f.is(H2Type::settings)) return false;
      l.h2_ready = true;
    }
    if (!carries_no_request(f)) return true;
    auto now = Clock::now();
    const double share = l.probation ? 1.0 / 8 : 1.0;
    l.tokens = std::min(m_limits.frame_burst * share,
                        l.tokens + std::chrono::duration<double>(now - l.refilled).count() * m_limits.frame_rate * share);
    l.refilled = now;
    if (l.tokens < 1) {
      cut_now = true;
      return false;
    }
    l.tokens -= 1;
    return true;
  }, on_payload);
  if (too_big) {
    cut(l, "a request's header block passed " + std::to_string(m_limits.max_header_block) +
               " bytes (HTTP/2 CONTINUATION flood?)");
    return false;
  }
  if (cut_now) {
    cut(l, "it sent frames that carry no request (stream resets, pings, settings) faster than " +
               std::to_string(static_cast<int>(m_limits.frame_rate)) + " a second after a burst of " +
               std::to_string(static_cast<int>(m_limits.frame_burst)) + " (HTTP/2 rapid reset?)");
    return false;
  }
  if (!http2) {
    close(l);
    return false;
  }
  return true;
}

bool GrpcGate::Impl::connect_upstream(Link& l) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  // Bound to an abstract name that carries the client's address, so gRPC's peer string (for
  // the log) names the client rather than this socket (client_of_peer).
  sockaddr_un self{};
  self.sun_family = AF_UNIX;
  std::string name = std::string(k_peer_tag) + std::to_string(::getpid()) + "/" + std::to_string(l.id) + " " +
                     grpc_style_address(l.ip, l.port);
  name = name.substr(0, sizeof self.sun_path - 2);
  std::memcpy(self.sun_path + 1, name.data(), name.size());
  ::bind(fd, reinterpret_cast<sockaddr*>(&self), static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size()));
  sockaddr_un to{};
  to.sun_family = AF_UNIX;
  std::string path = m_socket.string();
  std::memcpy(to.sun_path, path.data(), std::min(path.size(), sizeof to.sun_path - 1));
  l.upstream = fd;
  // A Unix connect finishes at once or fails at once (EAGAIN: gRPC's backlog is full).
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0) return true;
  spdlog::warn("{}: cannot reach gRPC at {}: {}", m_what, path, std::strerror(errno));
  return false;
}

bool GrpcGate::Impl::read_upstream(Link& l) {
  char buffer[k_read_chunk];
  while (l.to_client.size() < m_limits.buffer_bytes) {
    ssize_t n = ::recv(l.upstream, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    if (n <= 0) {
      begin_closing(l);  // gRPC closed the connection (idle, over age, shutting down): pass on what it sent
      return false;
    }
    std::string_view bytes(buffer, static_cast<std::size_t>(n));
    l.from_server.feed(bytes, [&](const H2Frame& f) {
      bool ends = f.is(H2Type::rst_stream) ||
                  ((f.is(H2Type::headers) || f.is(H2Type::data)) && (f.flags & k_h2_flag_end_stream) != 0);
      if (ends) {
        l.replying.erase(f.stream);
      } else if (f.stream != 0 && (f.is(H2Type::headers) || f.is(H2Type::data))) {
        l.replying.insert(f.stream);
      }
      return true;
    });
    l.to_client.append(bytes);
  }
  return true;
}

bool GrpcGate::Impl::write_client(Link& l) {
  l.ssl_wants_write = false;
  while (!l.to_client.empty()) {
    std::string_view v = l.to_client.view();
    if (l.ssl != nullptr) {
      ERR_clear_error();
      std::size_t written = 0;
      int r = SSL_write_ex(l.ssl, v.data(), v.size(), &written);
      if (r == 1) {
        l.to_client.consume(written);
        continue;
      }
      int e = SSL_get_error(l.ssl, r);
      if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) {
        l.ssl_wants_write = e == SSL_ERROR_WANT_WRITE;
        return true;
      }
      return false;
    }
    ssize_t n = ::send(l.client, v.data(), v.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      l.to_client.consume(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;
  }
  return true;
}

void GrpcGate::Impl::cut(Link& l, const std::string& why) {
  auto now = Clock::now();
  Penalty* p = penalty_of(l.ip, now);
  if (p == nullptr) {
    if (m_penalized.size() >= k_max_penalized) {
      auto idle = std::ranges::find_if(m_penalized, [](const auto& e) { return e.second.held == 0; });
      if (idle != m_penalized.end()) m_penalized.erase(idle);
    }
    p = &m_penalized[l.ip];
    // Logged once while the penalty lasts, not per cut: the end says how many followed.
    spdlog::warn("{}: cut {}: {}; slowing new connections from {} for {} s", m_what, grpc_style_address(l.ip, l.port),
                 why, l.ip, std::chrono::duration_cast<std::chrono::seconds>(m_limits.penalty).count());
  }
  p->until = now + m_limits.penalty;
  ++p->cuts;
  // The server's bytes up to its last whole frame still go out, then GOAWAY, unless a frame has
  // gone out in part already (then the connection just closes).
  std::uint64_t queued_from = l.from_server.offset() - l.to_client.size();
  if (l.h2_ready && l.from_server.boundary() >= queued_from) {
    l.to_client.keep_first(static_cast<std::size_t>(l.from_server.boundary() - queued_from));
    l.to_client.append(h2_goaway(l.last_stream, k_h2_enhance_your_calm, "too many frames without a request"));
  } else {
    l.to_client.clear();
  }
  begin_closing(l);
  if (l.to_client.empty()) return close(l);
  if (!write_client(l) || l.to_client.empty()) return close(l);
  watch(l);
}

// Every byte gRPC sent is with the kernel: FIN after them, then read (and drop) what the client
// still sends (the link stays watched for input) until it closes too, or the close deadline passes
// (sweep). A socket closed with input unread is reset, and the reset drops what the kernel had not
// yet sent: the end of a reply, whose
// client would retry a call that was done against a daemon that is gone. A gRPC client sends
// WINDOW_UPDATEs as it reads a long reply; an idle one notices the FIN only at its next poll.
void GrpcGate::Impl::linger(Link& l) {
  if (!l.fin_sent) {
    if (l.ssl != nullptr) SSL_shutdown(l.ssl);  // close_notify
    ::shutdown(l.client, SHUT_WR);
    l.fin_sent = true;
    l.deadline = Clock::now() + k_close_flush_time;
  }
  char buffer[k_read_chunk];
  for (int reads = 0; reads < 16; ++reads) {  // a client that sends without end waits for the next round
    ssize_t n = ::recv(l.client, buffer, sizeof buffer, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return close(l);  // the client closed too (or reset)
  }
  // Not closed once the client has every byte: a WINDOW_UPDATE arriving just then would reset
  // the socket, and a reset drops what the client had received but not yet read.
  watch(l);
}

void GrpcGate::Impl::begin_closing(Link& l) {
  l.closing = true;
  l.deadline = Clock::now() + k_close_flush_time;
  l.to_upstream.clear();
  if (l.upstream >= 0) {
    ::close(l.upstream);  // gRPC cancels the connection's calls
    l.upstream = -1;
    l.upstream_events = 0;
  }
}

namespace {
// Makes epoll watch `fd` for `wanted` (none: not at all), from `watched`.
void rewatch(int epoll_fd, int fd, std::uint64_t tag, std::uint32_t wanted, std::uint32_t& watched) {
  if (wanted == watched) return;
  epoll_event e{};
  e.events = wanted;
  e.data.u64 = tag;
  int op = wanted == 0 ? EPOLL_CTL_DEL : watched == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
  ::epoll_ctl(epoll_fd, op, fd, &e);
  watched = wanted;
}
}  // namespace

void GrpcGate::Impl::watch(Link& l) {
  if (l.client < 0) return;
  std::uint32_t client = 0;
  if (l.fin_sent || (!l.closing && (!l.tls_done || l.to_upstream.size() < m_limits.buffer_bytes))) client |= EPOLLIN;
  if (!l.to_client.empty() || l.ssl_wants_write) client |= EPOLLOUT;
  rewatch(m_epoll_fd, l.client, l.id << 1, client, l.client_events);
  if (l.upstream < 0) return;
  std::uint32_t upstream = 0;
  if (l.to_client.size() < m_limits.buffer_bytes) upstream |= EPOLLIN;
  if (!l.to_upstream.empty()) upstream |= EPOLLOUT;
  rewatch(m_epoll_fd, l.upstream, (l.id << 1) | 1, upstream, l.upstream_events);
}

void GrpcGate::Impl::close(Link& l) {
  if (l.client < 0) return;
  if (l.ssl != nullptr) {
    SSL_free(l.ssl);
    l.ssl = nullptr;
  }
  for (int* fd : {&l.client, &l.upstream}) {
    if (*fd >= 0) ::close(*fd);  // closing takes it out of the epoll set
    *fd = -1;
  }
  m_peers.remove(l.ip);
  m_budget.give_back(k_fds_per_link);
  m_closed.push_back(l.id);  // erased after this round of events, which may still name it
}

void GrpcGate::Impl::sweep() {
  admit_held();
  auto now = Clock::now();
  for (auto& [id, link] : m_links) {
    Link& l = *link;
    if (l.client < 0) continue;
    if (l.deadline > now) continue;
    if (l.closing) {
      close(l);
    } else if (!l.h2_ready) {
      close(l);
    }
  }
  for (std::uint64_t id : m_closed) m_links.erase(id);
  m_closed.clear();
}

GrpcGate::GrpcGate(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}
GrpcGate::~GrpcGate() = default;

Expected<std::unique_ptr<GrpcGate>> GrpcGate::start(const std::string& host, int port, const std::string& what,
                                                    const TlsFiles& tls, const GateLimits& limits, FdBudget& budget) {
  auto impl = std::make_unique<Impl>(what, limits, budget);
  if (auto opened = impl->open(host, port, tls); !opened) return opened.error();
  impl->run();
  return std::unique_ptr<GrpcGate>(new GrpcGate(std::move(impl)));
}

int GrpcGate::port() const { return m_impl->m_port; }
std::string GrpcGate::upstream_address() const { return "unix:" + m_impl->m_socket.string(); }
void GrpcGate::stop_accepting() {
  m_impl->m_stop_accepting = true;
  m_impl->wake();
}

bool GrpcGate::await_replies(std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard lock(m_impl->m_drain_mutex);
    m_impl->m_replies_out = false;
  }
  m_impl->m_awaiting = true;
  m_impl->wake();
  std::unique_lock lock(m_impl->m_drain_mutex);
  bool out = m_impl->m_drain_done.wait_until(lock, deadline, [&] { return m_impl->m_replies_out; });
  m_impl->m_awaiting = false;
  return out;
}

bool GrpcGate::drain(std::chrono::steady_clock::time_point deadline) {
  m_impl->m_draining = true;
  m_impl->wake();  // the event thread looks at once, not at its next sweep
  std::unique_lock lock(m_impl->m_drain_mutex);
  return m_impl->m_drain_done.wait_until(lock, deadline, [&] { return m_impl->m_drained; });
}

std::string client_of_peer(const std::string& grpc_peer) {
  // gRPC may give the bound name percent-encoded: its spaces as %20.
  std::string decoded = grpc_peer;
  for (std::size_t at = decoded.find("%20"); at != std::string::npos; at = decoded.find("%20", at + 1)) {
    decoded.replace(at, 3, " ");
  }
  std::string_view p = decoded;
  constexpr std::string_view k_abstract = "unix-abstract:";
  if (!p.starts_with(k_abstract)) return grpc_peer;
  p.remove_prefix(k_abstract.size());
  if (!p.starts_with(k_peer_tag)) return grpc_peer;
  auto space = p.find(' ', k_peer_tag.size());
  if (space == std::string_view::npos) return grpc_peer;
  return std::string(p.substr(space + 1));
}

}  // namespace kcache::server::net
