// The load harness: client threads, each with its own connection, issue one request after
// another for a fixed time; every request's latency is kept, so p50/p99 are exact over all
// threads (Google Benchmark reports means per thread, not percentiles across threads). kcached
// and Redis run through this same code, so their numbers differ only in what is behind `Op`.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace kcache::bench {

// One request; `i` counts this thread's requests. Returns false when the request failed (it is
// counted as an error and its latency is not kept).
using Op = std::function<bool(std::uint64_t i)>;
// Builds thread `thread`'s connection and returns its Op; runs before the clock starts.
using OpFactory = std::function<Op(int thread)>;

struct LoadOptions {
  int clients = 1;
  std::chrono::milliseconds warmup{300};    // requests in this window warm connections and caches
  std::chrono::milliseconds measure{2000};  // requests started in this window are measured
  // ... and each client goes on past the window until it has this many measured requests, so a
  // 16 MiB fetch that takes longer than the window still gets samples.
  int min_requests_per_client = 3;
};

struct LoadResult {
  std::uint64_t requests = 0;  // measured, successful
  std::uint64_t errors = 0;
  double seconds = 0;          // from the window's start to the last measured request's end
  double p50_us = 0, p99_us = 0, mean_us = 0, max_us = 0;
  // The sum of the clients' rates, each its measured requests over the time from its first
  // measured request's start to its last one's end (clients are never idle in between).
  double ops_per_s = 0;
};

LoadResult run_load(const LoadOptions& options, const OpFactory& factory);

// The CSV header and row kcache_bench_load prints (bench/report.py reads them).
std::string load_csv_header();
std::string load_csv_row(const std::string& system, const std::string& op, std::size_t size, int clients,
                         std::uint64_t entries, const LoadResult& r);

}  // namespace kcache::bench
