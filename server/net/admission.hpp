// What every listener of kcached does before a connection costs anything: take it off the
// backlog even when the process is out of descriptors, count it against the descriptors kcached
// keeps for its own work, and against its peer's share.
//
// Out of descriptors (EMFILE), accept(2) fails and the connection stays in the backlog, so the
// listening socket stays readable and an event loop spins on it (the HTTP listener logged 177,850
// warnings in 26 s; gRPC 1.51's own listener stopped accepting for good). The accepter keeps one
// spare descriptor: at EMFILE it closes the spare, accepts, closes the connection at once and
// opens the spare again, so the backlog drains and the loop sleeps. It logs one line when such an
// episode starts and one when it ends, whatever the number of connections refused in between.
#pragma once

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <string>

#include "kcache/expected.hpp"

namespace kcache::server::net {

// A non-blocking listening socket on HOST:PORT (an empty host: every address; port 0: a free
// one), with `backlog`; the port it got in `bound_port`. `what` names the listener in errors.
Expected<int> listen_tcp(const std::string& host, int port, int backlog, const std::string& what, int& bound_port);

// The descriptors connections may hold, across all listeners: the process's limit less what
// kcached keeps for itself (the store's files, its workers' pipes, Redis, logs).
class FdBudget {
 public:
  // What connections may hold in this process: raises the soft RLIMIT_NOFILE to the hard one
  // (as servers do), and keeps `reserve` for kcached's own work.
  static std::size_t for_this_process(std::size_t reserve);
  explicit FdBudget(std::size_t connections_may_hold) : m_limit(connections_may_hold) {}

  // Takes `n` descriptors for a connection; false (nothing taken) when that would pass the budget.
  bool take(std::size_t n);
  void give_back(std::size_t n) { m_held -= n; }
  std::size_t limit() const { return m_limit; }
  std::size_t held() const { return m_held; }

 private:
  std::size_t m_limit;
  std::atomic<std::size_t> m_held{0};
};

// Connections open per peer address (the port aside), for a per-peer cap.
class PeerCounts {
 public:
  explicit PeerCounts(std::size_t max_per_peer) : m_max(max_per_peer) {}
  bool add(const std::string& ip);  // false (not counted) when `ip` has its cap open already
  void remove(const std::string& ip);

 private:
  const std::size_t m_max;
  std::mutex m_mutex;  // guards m_open
  std::map<std::string, std::size_t> m_open;
};

// The peer address of an accepted socket: "10.0.0.5", "::1", and its port.
void peer_address(const sockaddr_storage& a, std::string& ip, int& port);

// accept4(2) of `listen_fd` (SOCK_NONBLOCK | SOCK_CLOEXEC) that survives running out of
// descriptors; one per listening socket, used by the thread that accepts on it.
class Accepter {
 public:
  explicit Accepter(std::string what);
  ~Accepter();
  Accepter(const Accepter&) = delete;
  Accepter& operator=(const Accepter&) = delete;

  // The next connection (its fd, and its peer in `peer`), or -1 when the backlog is empty or the
  // connection had to be refused for want of a descriptor (call again until -1 with errno EAGAIN).
  int accept(int listen_fd, sockaddr_storage& peer);

 private:
  const std::string m_what;
  int m_spare = -1;
  bool m_in_episode = false;
  std::size_t m_refused = 0;  // in this episode
};

}  // namespace kcache::server::net
