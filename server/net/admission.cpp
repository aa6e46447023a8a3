#include "net/admission.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

namespace kcache::server::net {

std::size_t FdBudget::for_this_process(std::size_t reserve) {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return 1024 > reserve ? 1024 - reserve : 0;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  // An unlimited or huge hard limit: more than any listener's connection cap will ask for.
  std::size_t total = limit.rlim_cur == RLIM_INFINITY ? (1u << 20) : static_cast<std::size_t>(limit.rlim_cur);
  return total > reserve ? total - reserve : 0;
}

bool FdBudget::take(std::size_t n) {
  std::size_t held = m_held.load();
  do {
    if (held + n > m_limit) return false;
  } while (!m_held.compare_exchange_weak(held, held + n));
  return true;
}

bool PeerCounts::add(const std::string& ip) {
  std::lock_guard lock(m_mutex);
  std::size_t& open = m_open[ip];
  if (open >= m_max) {
    if (open == 0) m_open.erase(ip);
    return false;
  }
  ++open;
  return true;
}

void PeerCounts::remove(const std::string& ip) {
  std::lock_guard lock(m_mutex);
  auto it = m_open.find(ip);
  if (it == m_open.end()) return;
  if (--it->second == 0) m_open.erase(it);
}

void peer_address(const sockaddr_storage& a, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = "";
  port = 0;
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

Expected<int> listen_tcp(const std::string& host, int port, int backlog, const std::string& what, int& bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string port_text = std::to_string(port);
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &found) != 0) {
    return make_error(ErrorCode::k_invalid_argument, what + ": cannot resolve '" + host + "'");
  }
  int listen_fd = -1;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr && listen_fd < 0; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, backlog) == 0) {
      listen_fd = fd;
    } else {
      why = std::strerror(errno);
      ::close(fd);
    }
  }
  freeaddrinfo(found);
  if (listen_fd < 0) {
    return make_error(ErrorCode::k_unavailable, what + ": cannot listen on " + host + ":" + port_text + " (" + why + ")");
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound), &length);
  std::string ip;
  peer_address(bound, ip, bound_port);
  return listen_fd;
}

namespace {
int open_spare() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }
}  // namespace

Accepter::Accepter(std::string what) : m_what(std::move(what)), m_spare(open_spare()) {}

Accepter::~Accepter() {
  if (m_spare >= 0) ::close(m_spare);
}

int Accepter::accept(int listen_fd, sockaddr_storage& peer) {
  for (;;) {
    socklen_t length = sizeof peer;
    int fd = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      if (m_in_episode) {
        spdlog::info("{}: accepting again; {} connections were refused while descriptors ran out", m_what, m_refused);
        m_in_episode = false;
        m_refused = 0;
      }
      if (m_spare < 0) m_spare = open_spare();
      return fd;
    }
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM) {
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        int e = errno;
        spdlog::debug("{}: accept: {}", m_what, std::strerror(e));
        errno = e;
      }
      return -1;
    }
    int why = errno;
    if (!m_in_episode) {
      spdlog::warn("{}: out of file descriptors ({}); refusing new connections until some close", m_what,
                   std::strerror(why));
      m_in_episode = true;
    }
    // Take the connection off the backlog with the spare descriptor and close it at once.
    if (m_spare < 0) {
      errno = EAGAIN;  // nothing to drain with: the caller sleeps until its next wake-up
      return -1;
    }
    ::close(m_spare);
    m_spare = -1;
    length = sizeof peer;
    int refused = ::accept4(listen_fd, reinterpret_cast<sockaddr*>(&peer), &length, SOCK_CLOEXEC);
    if (refused >= 0) {
      ::close(refused);
      ++m_refused;
    }
    m_spare = open_spare();
    if (refused < 0) {
      errno = EAGAIN;
      return -1;
    }
  }
}

}  // namespace kcache::server::net
