#include "load.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <latch>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

namespace kcache::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Nearest-rank percentile of sorted samples.
double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size(), std::max<std::size_t>(rank, 1)) - 1];
}

struct ThreadResult {
  std::vector<double> latencies_us;
  std::uint64_t errors = 0;
  Clock::time_point first_start{}, last_end{};
  std::string failure;  // the factory threw
};

}  // namespace

LoadResult run_load(const LoadOptions& options, const OpFactory& factory) {
  std::vector<ThreadResult> results(options.clients);
  std::latch connected(options.clients + 1);
  std::latch go(1);
  std::atomic<Clock::rep> start_ticks{0};
  std::vector<std::thread> threads;
  threads.reserve(options.clients);
  for (int t = 0; t < options.clients; ++t) {
    threads.emplace_back([&, t] {
      ThreadResult& mine = results[t];
      Op op;
      try {
        op = factory(t);
      } catch (const std::exception& e) {
        mine.failure = e.what();
      }
      connected.count_down();
      go.wait();
      if (!op) return;
      // Every thread uses the same window, so all clients overlap for the whole measurement.
      Clock::time_point start{Clock::duration(start_ticks.load())};
      Clock::time_point measure_from = start + options.warmup, stop = measure_from + options.measure;
      mine.latencies_us.reserve(4096);
      std::uint64_t measured = 0;
      for (std::uint64_t i = 0;; ++i) {
        Clock::time_point before = Clock::now();
        if (before >= stop && measured >= static_cast<std::uint64_t>(options.min_requests_per_client)) break;
        bool ok = op(i);
        Clock::time_point after = Clock::now();
        if (before < measure_from) continue;  // warm-up: at least the first request of each client
        if (measured++ == 0) mine.first_start = before;
        mine.last_end = after;
        if (!ok) {
          ++mine.errors;
          continue;
        }
        mine.latencies_us.push_back(std::chrono::duration<double, std::micro>(after - before).count());
      }
    });
  }
  connected.arrive_and_wait();
  Clock::time_point start = Clock::now();
  start_ticks = start.time_since_epoch().count();
  go.count_down();
  for (std::thread& t : threads) t.join();

  LoadResult out;
  std::vector<double> all;
  Clock::time_point last = start + options.warmup;
  for (ThreadResult& r : results) {
    if (!r.failure.empty()) throw std::runtime_error("a client could not start: " + r.failure);
    all.insert(all.end(), r.latencies_us.begin(), r.latencies_us.end());
    out.errors += r.errors;
    last = std::max(last, r.last_end);
    double busy = std::chrono::duration<double>(r.last_end - r.first_start).count();
    if (busy > 0) out.ops_per_s += static_cast<double>(r.latencies_us.size()) / busy;
  }
  std::sort(all.begin(), all.end());
  out.requests = all.size();
  out.seconds = std::chrono::duration<double>(last - (start + options.warmup)).count();
  out.p50_us = percentile(all, 50);
  out.p99_us = percentile(all, 99);
  out.max_us = all.empty() ? 0 : all.back();
  out.mean_us = all.empty() ? 0 : std::accumulate(all.begin(), all.end(), 0.0) / static_cast<double>(all.size());
  return out;
}

std::string load_csv_header() {
  return "system,op,size_bytes,clients,entries,requests,errors,seconds,p50_us,p99_us,mean_us,max_us,ops_per_s,"
         "mib_per_s";
}

std::string load_csv_row(const std::string& system, const std::string& op, std::size_t size, int clients,
                         std::uint64_t entries, const LoadResult& r) {
  char row[512];
  double mib_per_s = r.ops_per_s * static_cast<double>(size) / (1024.0 * 1024.0);
  std::snprintf(row, sizeof row, "%s,%s,%zu,%d,%llu,%llu,%llu,%.3f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f", system.c_str(),
                op.c_str(), size, clients, static_cast<unsigned long long>(entries),
                static_cast<unsigned long long>(r.requests), static_cast<unsigned long long>(r.errors), r.seconds,
                r.p50_us, r.p99_us, r.mean_us, r.max_us, r.ops_per_s, mib_per_s);
  return row;
}

}  // namespace kcache::bench
