// kcache_bench_coalesce: N clients send the same compile at the same moment to a kcached with an
// empty database. Without coalescing that is N compiles; with it, one, and the others wait for
// its result. Prints one CSV line per run:
//   clients,wall_ms,compiles,misses,coalesced,hits,errors
// wall_ms runs from the release of all clients to the last reply; compiles, misses and coalesced
// are the daemon's own counters (GetStats), so use a fresh database (and daemon) for each N.
//
//   kcache_bench_coalesce --server 127.0.0.1:P --clients 64 [--kernels 100]
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <latch>
#include <memory>
#include <string>
#include <thread>

#include "bench_data.hpp"
#include "kcache/client.hpp"
#include "slow_module.hpp"  // the tests' slow module

namespace {

using namespace kcache;

using test::slow_device_module;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"N identical concurrent compiles against one kcached"};
  std::string server;
  int clients = 1, kernels = 100;
  app.add_option("--server", server, "kcached HOST:PORT")->required();
  app.add_option("--clients", clients, "concurrent identical compiles");
  app.add_option("--kernels", kernels, "kernels in the module (its compile time grows with them)");
  CLI11_PARSE(app, argc, argv);

  v1::CompileRequest request;
  request.set_side(v1::SIDE_DEVICE);
  request.set_format(v1::FORMAT_LLVM_TEXT);
  request.set_module(slow_device_module(kernels));
  request.add_archs(std::string(bench::k_arch));
  request.add_emit(v1::KIND_PTX);
  request.set_digests_only(true);  // what is measured is the compile, not moving its PTX N times

  // Connect every client first (a channel connects lazily: one GetStats each), then release them
  // together, so the compiles really arrive at once.
  std::vector<std::unique_ptr<Client>> connections;
  ClientOptions options;
  options.server = server;
  for (int i = 0; i < clients; ++i) {
    connections.push_back(std::make_unique<Client>(options));
    if (auto s = connections.back()->stats(); !s) {
      std::cerr << "kcache_bench_coalesce: " << s.error().message << "\n";
      return 1;
    }
  }
  std::vector<v1::Outcome> outcomes(clients, v1::OUTCOME_UNSPECIFIED);
  std::latch ready(clients + 1), go(1);
  std::vector<std::thread> threads;
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      ready.count_down();
      go.wait();
      auto r = connections[i]->compile(request);
      if (r) outcomes[i] = r->outcome();
      else std::cerr << "kcache_bench_coalesce: " << r.error().message << "\n";
    });
  }
  ready.arrive_and_wait();
  auto start = std::chrono::steady_clock::now();
  go.count_down();
  for (std::thread& t : threads) t.join();
  double wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

  auto stats = connections.front()->stats();
  if (!stats) {
    std::cerr << "kcache_bench_coalesce: " << stats.error().message << "\n";
    return 1;
  }
  int hits = 0, errors = 0;
  for (v1::Outcome o : outcomes) {
    hits += o == v1::OUTCOME_HIT;
    errors += o == v1::OUTCOME_UNSPECIFIED;
  }
  std::printf("%d,%.1f,%llu,%llu,%llu,%d,%d\n", clients, wall_ms, static_cast<unsigned long long>(stats->compiles()),
              static_cast<unsigned long long>(stats->misses()), static_cast<unsigned long long>(stats->coalesced()),
              hits, errors);
  return errors == 0 ? 0 : 1;
}
