// kcache_bench_store: the store API alone (no gRPC) on a database kcache_bench_populate filled
// with --scale-entries N. How lookups and reads cost as the store grows, without the daemon's
// per-call overhead hiding it. Google Benchmark; a random key per iteration, so every level of the
// LSM tree and the whole key space are exercised, not one cached block.
//
//   kcache_bench_store --db DIR --entries N [--benchmark_* flags]
//
// StoreList/present: Store::list of a stored key (what Lookup, and Fetch before its read, do).
// StoreList/absent:  Store::list of a key never stored (a miss; the prefix bloom filter's case).
// StoreGet:          Store::get of a stored key's image, digest-verified (Fetch's read).
#include <benchmark/benchmark.h>

#include <cstring>
#include <iostream>
#include <string>

#include "bench_data.hpp"
#include "store/store.hpp"

namespace {

using namespace kcache;

std::uint64_t next(std::uint64_t& rng) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;  // xorshift64
  return rng;
}

void list_present(benchmark::State& state, server::Store* store, std::uint64_t entries) {
  std::uint64_t rng = 88172645463325252ULL;
  for (auto _ : state) {
    auto metas = store->list(Side::device, bench::scale_key(next(rng) % entries));
    if (!metas || metas->empty()) state.SkipWithError("a stored key was not found");
    benchmark::DoNotOptimize(metas);
  }
  state.counters["entries"] = static_cast<double>(entries);
}

void list_absent(benchmark::State& state, server::Store* store, std::uint64_t entries) {
  std::uint64_t rng = 88172645463325252ULL;
  for (auto _ : state) {
    // Indexes past the populated range name keys that were never written.
    auto metas = store->list(Side::device, bench::scale_key(entries + next(rng) % entries));
    if (!metas || !metas->empty()) state.SkipWithError("an absent key was found");
    benchmark::DoNotOptimize(metas);
  }
  state.counters["entries"] = static_cast<double>(entries);
}

void get_present(benchmark::State& state, server::Store* store, std::uint64_t entries) {
  std::uint64_t rng = 88172645463325252ULL;
  const ImageRequest which{std::string(bench::k_arch), ImageKind::ptx};
  for (auto _ : state) {
    auto image = store->get(Side::device, bench::scale_key(next(rng) % entries), which);
    if (!image) state.SkipWithError("a stored image could not be read");
    benchmark::DoNotOptimize(image);
  }
  state.counters["entries"] = static_cast<double>(entries);
}

// Takes --db and --entries out of argv, leaving Google Benchmark's own flags.
bool take_flag(int& argc, char** argv, const char* name, std::string& value) {
  std::size_t n = std::strlen(name);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], name, n) != 0) continue;
    if (argv[i][n] == '=') value = argv[i] + n + 1;
    else if (argv[i][n] == '\0' && i + 1 < argc) value = argv[i + 1];
    else continue;
    int used = argv[i][n] == '=' ? 1 : 2;
    for (int j = i; j + used <= argc; ++j) argv[j] = argv[j + used];
    argc -= used;
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  std::string db, entries_text;
  if (!take_flag(argc, argv, "--db", db) || !take_flag(argc, argv, "--entries", entries_text)) {
    std::cerr << "usage: kcache_bench_store --db DIR --entries N [--benchmark_* flags]\n";
    return 2;
  }
  std::uint64_t entries = std::stoull(entries_text);
  auto store = server::Store::open(server::StoreOptions{db, {}});
  if (!store) {
    std::cerr << "kcache_bench_store: " << store.error().message << "\n";
    return 1;
  }
  benchmark::RegisterBenchmark("StoreList/present", list_present, store->get(), entries);
  benchmark::RegisterBenchmark("StoreList/absent", list_absent, store->get(), entries);
  benchmark::RegisterBenchmark("StoreGet", get_present, store->get(), entries);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
