// kcache_bench_populate: writes benchmark entries into a kcache database through the store API
// (Store::put), before kcached is started on it. This is how the benchmarks get images of exact
// sizes, and a million entries, without compiling anything: the key is arbitrary (kcached's
// Fetch and Lookup take any key), the image a PTX-kind device image for sm_90.
//
//   kcache_bench_populate --db DIR --hit-sizes 4K,64K,1M,16M --hit-keys 8
//   kcache_bench_populate --db DIR --scale-entries 1000000
//
// Prints one CSV line: entries,payload_bytes,seconds. The store is flushed and closed on exit,
// so `du` of the folder afterwards is what the entries take on disk.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <span>
#include <stdexcept>
#include <string>

#include "bench_data.hpp"
#include "store/store.hpp"

namespace {

using namespace kcache;

int run(const std::string& db, const std::string& hit_sizes, int hit_keys, std::uint64_t scale_entries) {
  auto store = server::Store::open(server::StoreOptions{db, {}});
  if (!store) {
    std::cerr << "kcache_bench_populate: " << store.error().message << "\n";
    return 1;
  }
  server::EntryRecord record;
  record.format = InputFormat::ptx;
  record.target = std::string(k_device_triple);
  std::uint64_t entries = 0, payload = 0;
  auto put = [&](const Key& key, std::string data) {
    server::Image image = server::make_image({std::string(bench::k_arch), ImageKind::ptx}, std::move(data));
    payload += image.data.size();
    auto done = (*store)->put(Side::device, key, record, std::span<const server::Image>(&image, 1));
    if (!done) throw std::runtime_error(done.error().message);
    ++entries;
  };

  auto start = std::chrono::steady_clock::now();
  try {
    if (!hit_sizes.empty()) {
      for (std::size_t size : bench::parse_size_list(hit_sizes)) {
        for (int i = 0; i < hit_keys; ++i) put(bench::hit_key(size, i), bench::ptx_like(size, size * 1000 + i));
      }
    }
    for (std::uint64_t i = 0; i < scale_entries; ++i) {
      put(bench::scale_key(i), bench::ptx_like(bench::scale_size(i), i));
      if ((i + 1) % 100000 == 0) std::cerr << "  " << (i + 1) << " entries written\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "kcache_bench_populate: " << e.what() << "\n";
    return 1;
  }
  if (auto flushed = (*store)->flush(); !flushed) {
    std::cerr << "kcache_bench_populate: " << flushed.error().message << "\n";
    return 1;
  }
  store->reset();  // closes RocksDB, so kcached can open the folder next
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%llu,%llu,%.3f\n", static_cast<unsigned long long>(entries), static_cast<unsigned long long>(payload),
              seconds);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes benchmark entries into a kcache database through the store API"};
  std::string db, hit_sizes;
  int hit_keys = 8;
  std::uint64_t scale_entries = 0;
  app.add_option("--db", db, "database folder (created if missing)")->required();
  app.add_option("--hit-sizes", hit_sizes, "image sizes for the hit path, e.g. 4K,64K,1M,16M");
  app.add_option("--hit-keys", hit_keys, "entries per hit-path size");
  app.add_option("--scale-entries", scale_entries, "small (1-4 KiB) entries for the scale benchmark");
  CLI11_PARSE(app, argc, argv);
  return run(db, hit_sizes, hit_keys, scale_entries);
}
