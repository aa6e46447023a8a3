// kcache_bench_load: latency (p50, p99) and throughput of one kind of request, for each image size
// and client count asked for, printed as CSV (support/load.hpp's columns).
//
//   kcached, hit path:  --system kcached --server 127.0.0.1:P --op fetch --sizes 4K,64K --clients 1,16
//   kcached, scale:     --system kcached --server 127.0.0.1:P --op lookup --scale-entries 1000000
//   gRPC floor:         --system kcached --server 127.0.0.1:P --op stats --sizes 0 --clients 1,16
//   Redis, hit path:    --system redis --redis-port P --op get --sizes 4K,64K --clients 1,16 --load
//   the CSV header:     --header
//
// kcached is reached through libkcache (kcache::Client::fetch / lookup), exactly as a runtime
// would: each client thread has its own Client, hence its own channel and TCP connection. Redis is
// reached through hiredis, one connection per client thread. The databases are filled beforehand
// (kcache_bench_populate for kcached; --load SETs the same bytes into Redis), under the keys
// support/bench_data.hpp derives, so both systems serve identical bytes under identical keys.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_data.hpp"
#include "kcache/client.hpp"
#include "load.hpp"

#ifdef KCACHE_BENCH_HIREDIS
#include <hiredis/hiredis.h>
#endif

namespace {

using namespace kcache;
using namespace kcache::bench;

// Says what went wrong once per run, not once per failed request.
void report_failure(const std::string& what) {
  static std::once_flag once;
  std::call_once(once, [&] { std::cerr << "kcache_bench_load: a request failed: " << what << "\n"; });
}

// Which entries the requests go to: on the hit path, thread t's i-th request takes entry
// (t + i) mod hit_keys of its size, so clients spread over the keys; at scale, a uniformly random
// one of the store's entries, so lookups touch the whole database rather than a cached corner.
struct Target {
  std::size_t size = 0;             // hit path: every image has this size
  int hit_keys = 0;
  std::uint64_t scale_entries = 0;  // scale: draw from this many entries instead

  std::uint64_t pick(int thread, std::uint64_t i, std::uint64_t& rng) const {
    if (scale_entries == 0) return (thread + i) % hit_keys;
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;  // xorshift64
    return rng % scale_entries;
  }
  Key key(std::uint64_t index) const { return scale_entries == 0 ? hit_key(size, index) : scale_key(index); }
  std::size_t size_of(std::uint64_t index) const { return scale_entries == 0 ? size : scale_size(index); }
};

OpFactory kcached_op(const std::string& server, const std::string& token, const std::string& op, const Target& target) {
  return [=](int thread) -> Op {
    ClientOptions options;
    options.server = server;
    options.token = token;
    options.deadline = std::chrono::seconds(60);
    auto client = std::make_shared<Client>(options);
    auto rng = std::make_shared<std::uint64_t>(0x9e3779b97f4a7c15ULL * (thread + 1));
    if (op == "stats") {  // GetStats touches no store: the floor of one gRPC round trip to kcached
      return [=](std::uint64_t) {
        auto r = client->stats();
        if (!r) return report_failure(r.error().message), false;
        return true;
      };
    }
    if (op == "lookup") {
      return [=](std::uint64_t i) {
        v1::LookupRequest request;
        request.set_side(v1::SIDE_DEVICE);
        request.add_keys(target.key(target.pick(thread, i, *rng)).hex());
        auto r = client->lookup(request);
        if (!r) return report_failure(r.error().message), false;
        if (r->results_size() != 1 || !r->results(0).found()) return report_failure("key not stored"), false;
        return true;
      };
    }
    return [=](std::uint64_t i) {
      std::uint64_t index = target.pick(thread, i, *rng);
      v1::FetchRequest request;
      request.set_key(target.key(index).hex());
      request.set_arch(std::string(k_arch));
      request.set_side(v1::SIDE_DEVICE);
      request.set_kind(v1::KIND_PTX);
      auto r = client->fetch(request);  // checks the bytes against the digest, as a runtime would
      if (!r) return report_failure(r.error().message), false;
      if (r->data.size() != target.size_of(index)) return report_failure("wrong size"), false;
      return true;
    };
  };
}

#ifdef KCACHE_BENCH_HIREDIS
struct RedisDeleter {
  void operator()(redisContext* c) const { redisFree(c); }
};
using RedisConnection = std::unique_ptr<redisContext, RedisDeleter>;

RedisConnection redis_connect(int port) {
  RedisConnection c(redisConnect("127.0.0.1", port));
  if (!c || c->err) throw std::runtime_error("cannot reach redis-server on port " + std::to_string(port));
  return c;
}

// SETs what kcache_bench_populate puts into kcached's store: the same bytes under the same keys.
void redis_load(int port, const std::vector<std::size_t>& sizes, int hit_keys) {
  RedisConnection c = redis_connect(port);
  for (std::size_t size : sizes) {
    for (int i = 0; i < hit_keys; ++i) {
      std::string key = hit_key(size, i).hex(), data = ptx_like(size, size * 1000 + i);
      auto* reply = static_cast<redisReply*>(
          redisCommand(c.get(), "SET %b %b", key.data(), key.size(), data.data(), data.size()));
      if (reply == nullptr || reply->type == REDIS_REPLY_ERROR) {
        throw std::runtime_error("redis SET failed: " + std::string(reply ? reply->str : c->errstr));
      }
      freeReplyObject(reply);
    }
  }
}

OpFactory redis_op(int port, const Target& target) {
  return [=](int thread) -> Op {
    std::shared_ptr<redisContext> c(redis_connect(port).release(), RedisDeleter());
    auto rng = std::make_shared<std::uint64_t>(0x9e3779b97f4a7c15ULL * (thread + 1));
    return [=](std::uint64_t i) {
      std::uint64_t index = target.pick(thread, i, *rng);
      std::string key = target.key(index).hex();
      auto* reply = static_cast<redisReply*>(redisCommand(c.get(), "GET %b", key.data(), key.size()));
      if (reply == nullptr) return report_failure(c->errstr), false;
      bool ok = reply->type == REDIS_REPLY_STRING && reply->len == target.size_of(index);
      if (!ok) report_failure("redis GET did not return the stored value");
      freeReplyObject(reply);
      return ok;
    };
  };
}
#endif

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Latency and throughput of kcached Fetch/Lookup and Redis GET"};
  std::string system = "kcached", server, op = "fetch", sizes = "4K,64K,1M,16M", clients = "1,16", token_file, label;
  int redis_port = 0, hit_keys = 8, seconds_ms = 2000, warmup_ms = 300;
  std::uint64_t scale_entries = 0;
  bool load = false, header = false;
  app.add_option("--system", system, "kcached or redis")->check(CLI::IsMember({"kcached", "redis"}));
  app.add_option("--server", server, "kcached HOST:PORT");
  app.add_option("--token-file", token_file, "kcached: send the token in this file with every call");
  app.add_option("--label", label, "the system's name in the CSV (default: --system)");
  app.add_option("--redis-port", redis_port, "redis-server port on 127.0.0.1");
  app.add_option("--op", op, "kcached: fetch, lookup or stats (no store: the gRPC floor); redis: get")
      ->check(CLI::IsMember({"fetch", "lookup", "stats", "get"}));
  app.add_option("--sizes", sizes, "hit path: image sizes (entries written by kcache_bench_populate --hit-sizes)");
  app.add_option("--hit-keys", hit_keys, "hit path: entries per size");
  app.add_option("--scale-entries", scale_entries, "scale: draw keys from this many small entries instead");
  app.add_option("--clients", clients, "client threads, a list: one measurement each");
  app.add_option("--measure-ms", seconds_ms, "measured window per measurement");
  app.add_option("--warmup-ms", warmup_ms, "unmeasured warm-up before it");
  app.add_flag("--load", load, "redis: SET the hit-path values first");
  app.add_flag("--header", header, "print the CSV header and exit");
  CLI11_PARSE(app, argc, argv);

  try {
    std::string token;
    if (!token_file.empty()) {
      std::ifstream in(token_file);
      if (!std::getline(in, token) || token.empty()) throw std::runtime_error("no token in " + token_file);
    }
    if (label.empty()) label = system;
    std::vector<std::size_t> size_list = scale_entries > 0 ? std::vector<std::size_t>{0} : parse_size_list(sizes);
    if (header) return std::printf("%s\n", load_csv_header().c_str()), 0;
#ifdef KCACHE_BENCH_HIREDIS
    if (system == "redis" && load) redis_load(redis_port, size_list, hit_keys);
#else
    if (system == "redis") throw std::runtime_error("built without hiredis (libhiredis-dev): cannot measure Redis");
#endif
    for (std::size_t size : size_list) {
      for (int n : parse_int_list(clients)) {
        Target target{size, hit_keys, scale_entries};
        OpFactory factory;
#ifdef KCACHE_BENCH_HIREDIS
        if (system == "redis") factory = redis_op(redis_port, target);
#endif
        if (system == "kcached") factory = kcached_op(server, token, op, target);
        LoadResult r = run_load(LoadOptions{n, std::chrono::milliseconds(warmup_ms), std::chrono::milliseconds(seconds_ms)},
                                factory);
        std::printf("%s\n", load_csv_row(label, op, size, n, scale_entries, r).c_str());
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "kcache_bench_load: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
