// The status page: a read-only HTML page at / of the HTTP listener (--http-listen) for the people
// who run kcached, and the JSON it is drawn from, behind the read role like every route there.
//
//   GET /                          the page (status_page.html, built into the binary), its counters,
//                                  lists and entry rendered here, so it reads without JavaScript;
//                                  ?side=device|host&key=KEY shows that entry (the entry browser)
//   GET /v1/status                 health, counters, store, workers, the remote tier, the newest
//                                  compiles and errors (JSON)
//   GET /v1/status/history         the last hour at 10 s resolution (JSON): hit rate, requests,
//                                  compile time percentiles, hits by tier
//   GET /v1/status/entry?side=S&key=K  an entry's images with their kernels and resources (JSON)
//
// A browser sends its token as "Authorization: Bearer TOKEN" or as the cookie kcache_token
// (http_authorization). Without one that may read, every route answers only its refusal. Each
// list is bounded (Activity, the history ring), and every byte that came from a client (kernel
// names, diagnostics, a key asked for) is escaped for HTML or JSON where it is written.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace kcache::v1 {
class Stats;
}

namespace kcache::server {

class Authenticator;
class Cache;
class JobQueue;
class Metrics;
class Router;

// One interval of the history: what changed in it.
struct StatusSample {
  std::int64_t end = 0;  // Unix seconds
  double seconds = 0;    // how long it lasted
  std::uint64_t hits = 0, misses = 0, coalesced = 0, errors = 0, requests = 0;
  // Compile times (seconds) at the 50th, 90th and 99th percentile; -1 without compiles.
  double p50 = -1, p90 = -1, p99 = -1;
  std::array<std::uint64_t, 4> tiers{};  // answers by tier: hot, local, remote, compile
};

class StatusPage {
 public:
  static constexpr std::chrono::seconds k_interval{10};
  static constexpr std::size_t k_samples = 360;  // an hour

  // Samples `stats` (the counters GetStats answers) every k_interval from now on, and the
  // compile times `cache` saw, on a thread of its own.
  StatusPage(Cache& cache, const JobQueue& pool, std::function<v1::Stats()> stats);
  ~StatusPage();  // stops sampling
  StatusPage(const StatusPage&) = delete;
  StatusPage& operator=(const StatusPage&) = delete;

  // The routes above, for callers `auth` lets read; each counted in `metrics`; and /v1/session,
  // which sets the token cookie (Secure where the listener is `tls`).
  void add_routes(Router& router, const Authenticator& auth, Metrics& metrics, bool tls);

  // The samples kept, oldest first, then the interval in progress.
  std::vector<StatusSample> history() const;

 private:
  void sample_loop();
  // What changed from m_last to `now`, with `durations` for the percentiles.
  StatusSample delta(const v1::Stats& now, std::vector<double> durations) const;

  Cache& m_cache;
  const JobQueue& m_pool;
  const std::function<v1::Stats()> m_stats;
  const std::chrono::system_clock::time_point m_started;

  mutable std::mutex m_mutex;  // guards the ring, m_last and m_stopping
  std::condition_variable m_wake;
  std::array<StatusSample, k_samples> m_ring{};
  std::size_t m_next = 0, m_count = 0;
  std::unique_ptr<v1::Stats> m_last;                // the counters at the end of the last sample
  std::chrono::steady_clock::time_point m_last_at;  // and when that was
  bool m_stopping = false;
  std::thread m_sampler;
};

}  // namespace kcache::server
