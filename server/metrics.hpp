// Metrics: request counts by method and status (counted by a gRPC server interceptor, so every
// call is seen, refused ones included), a compile-latency histogram, and a Prometheus text
// endpoint over plain HTTP (--metrics-listen) that adds the daemon's Stats. Debian 12 packages no
// C++ Prometheus client, so the text format (version 0.0.4) is written here; cpp-httplib serves it.
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include "kcache/expected.hpp"

// Declared only: what includes this header (the cache core) sees no gRPC or protobuf header.
namespace grpc::experimental {
class ServerInterceptorFactoryInterface;
}
namespace kcache::v1 {
class Stats;
}

namespace httplib {
class Server;
}

namespace kcache::server {

class Metrics {
 public:
  // Upper bounds (seconds) of the compile-latency buckets; +Inf is implied.
  static constexpr std::array<double, 12> k_compile_buckets = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                              0.5,   1,    2.5,   5,    10,  60};

  void count_request(const std::string& service, const std::string& method, int code);
  // The same for a gRPC call to `path` ("/kcache.v1.KCache/Compile") that no interceptor sees (one
  // refused on its headers); a method no service here defines counts as "unknown".
  void count_call(std::string_view path, int code);
  void observe_compile(double seconds);

  // Where an answer came from, for the per-tier latency histograms.
  enum class Tier { hot, local, remote, compile };
  static constexpr std::array<double, 16> k_tier_buckets = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                           0.05,   0.1,     0.25,   0.5,   1,      2.5,   10,    60};
  void observe_tier(Tier tier, double seconds);

  // Fills the request counts and the histogram into `stats` (kcache stats shows them).
  void fill(v1::Stats& stats) const;

  // The Prometheus text exposition of `stats` (as filled by the service and fill()).
  static std::string render(const v1::Stats& stats);

  // Counts every call's final status; install with ServerBuilder::experimental().
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> interceptor_factory();

 private:
  mutable std::mutex m_mutex;  // guards the maps and the histogram
  std::map<std::tuple<std::string, std::string, int>, std::uint64_t> m_requests;  // service, method, code
  std::array<std::uint64_t, k_compile_buckets.size() + 1> m_buckets{};           // not cumulative
  double m_compile_seconds = 0;
  std::uint64_t m_compiles = 0;
  struct TierHistogram {
    std::array<std::uint64_t, k_tier_buckets.size() + 1> buckets{};  // not cumulative
    double seconds = 0;
  };
  std::array<TierHistogram, 4> m_tiers{};  // by Tier
};

// Serves GET /metrics on `server` (an HttpListener's); `stats` is called for every scrape.
void add_metrics_route(httplib::Server& server, std::function<v1::Stats()> stats);

}  // namespace kcache::server
