// The remote tier, measured (bench/remote_tier.py drives it; bench/README.md explains it).
//
//   kcache_bench_remote hit --daemon ADDR --redis HOST:PORT --secret FILE [--size N] [--keys N]
//     Writes N entries into Redis as another daemon of the fleet would (the same encoding and
//     HMAC, server/remote/entry.hpp), each one 64 KiB PTX image under its own key. Then three
//     passes over the keys, each request after the last: the first fetch of each through the
//     daemon (from the remote: read, verified, kept locally), the second fetch (from the local
//     tiers), and a direct HGET of the same bytes from Redis (hiredis, one kept connection).
//     Prints the medians and p90s as CSV rows.
//
//   kcache_bench_remote stampede --daemons A,B,C --first N [--keys 20] [--clients 16]
//     Every client of every daemon compiles the same KEYS modules at once (saxpy renamed, each
//     client in its own order); prints the compiles the fleet ran and the failures.
#include <CLI/CLI.hpp>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

#include "bench_data.hpp"
#include "kcache/client.hpp"
#include "remote/entry.hpp"
#include "remote/redis.hpp"

namespace {

using namespace kcache;
using Clock = std::chrono::steady_clock;

double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<std::size_t>(q * static_cast<double>(v.size() - 1))];
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "kcache_bench_remote: %s\n", message.c_str());
  std::exit(1);
}

int run_hit(const std::string& daemon, const std::string& redis_address, const std::string& secret_file,
            std::size_t size, int keys) {
  Client client(ClientOptions{daemon, std::chrono::seconds(30)});
  auto caps = client.capabilities();
  if (!caps) die("capabilities: " + caps.error().message);
  auto fingerprint = digest_from_hex(caps->fingerprint());
  auto secret = server::remote::FleetSecret::read(secret_file);
  if (!fingerprint || !secret) die("no fingerprint or no fleet secret");
  std::string host = redis_address.substr(0, redis_address.rfind(':'));
  int port = std::stoi(redis_address.substr(redis_address.rfind(':') + 1));
  redisContext* redis = redisConnect(host.c_str(), port);
  if (redis == nullptr || redis->err != 0) die("cannot connect to Redis at " + redis_address);

  // The entries, as another daemon of the fleet wrote them.
  std::vector<Key> written;
  std::string run_tag = std::to_string(Clock::now().time_since_epoch().count());
  for (int i = 0; i < keys; ++i) {
    Key key{sha256("bench-remote/" + run_tag + "/" + std::to_string(i))};
    server::Image image = server::make_image({std::string(bench::k_arch), ImageKind::ptx}, bench::ptx_like(size, i));
    server::EntryRecord record{InputFormat::llvm_text, std::string(k_device_triple), 0};
    auto fields = server::remote::encode_fields(*secret, Side::device, key, *fingerprint, record, {&image, 1});
    std::string name = server::remote::entry_key(Side::device, key);
    std::vector<const char*> argv = {"HSET", name.c_str()};
    std::vector<std::size_t> lengths = {4, name.size()};
    for (const auto& [field, value] : fields) {
      argv.push_back(field.data());
      lengths.push_back(field.size());
      argv.push_back(value.data());
      lengths.push_back(value.size());
    }
    auto* reply = static_cast<redisReply*>(redisCommandArgv(redis, static_cast<int>(argv.size()), argv.data(), lengths.data()));
    if (reply == nullptr || reply->type == REDIS_REPLY_ERROR) die("HSET failed");
    freeReplyObject(reply);
    written.push_back(key);
  }

  // Each measure is one pass over the keys, one request after another (as bench/run.sh's window
  // does), so that neither kcached nor Redis pays for waking up between requests.
  std::vector<double> first, second, hget;
  for (std::vector<double>* into : {&first, &second}) {
    for (const Key& key : written) {
      v1::FetchRequest request;
      request.set_side(v1::SIDE_DEVICE);
      request.set_key(key.hex());
      request.set_arch(std::string(bench::k_arch));
      request.set_kind(v1::KIND_PTX);
      auto start = Clock::now();
      auto fetched = client.fetch(request);
      into->push_back(micros(Clock::now() - start));
      if (!fetched || fetched->data.size() != size) die("fetch of " + key.hex() + " failed");
    }
  }
  std::string field = "i:" + std::string(bench::k_arch) + ".ptx";
  for (const Key& key : written) {
    std::string name = server::remote::entry_key(Side::device, key);
    auto start = Clock::now();
    auto* reply = static_cast<redisReply*>(redisCommand(redis, "HGET %b %b", name.data(), name.size(), field.data(), field.size()));
    hget.push_back(micros(Clock::now() - start));
    if (reply == nullptr || reply->type != REDIS_REPLY_STRING || reply->len != size) die("HGET failed");
    freeReplyObject(reply);
  }
  redisFree(redis);
  std::printf("measure,p50_us,p90_us\n");
  std::printf("remote_first,%.1f,%.1f\n", quantile(first, 0.5), quantile(first, 0.9));
  std::printf("remote_then_local,%.1f,%.1f\n", quantile(second, 0.5), quantile(second, 0.9));
  std::printf("redis_hget,%.1f,%.1f\n", quantile(hget, 0.5), quantile(hget, 0.9));
  return 0;
}

int run_stampede(const std::vector<std::string>& daemons, int first, int keys, int clients, const std::string& module) {
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  auto start = Clock::now();
  for (const std::string& daemon : daemons) {
    for (int c = 0; c < clients; ++c) {
      threads.emplace_back([&, daemon, c] {
        Client client(ClientOptions{daemon, std::chrono::seconds(300)});
        for (int i = 0; i < keys; ++i) {
          int n = first + (i + c) % keys;
          std::string text = module;
          text.replace(text.find("@saxpy("), 7, "@saxpy_" + std::to_string(n) + "(");
          v1::CompileRequest r;
          r.set_side(v1::SIDE_DEVICE);
          r.set_module(text);
          r.add_archs("sm_80");
          r.add_emit(v1::KIND_PTX);
          if (!client.compile(r)) ++failures;
        }
      });
    }
  }
  for (std::thread& t : threads) t.join();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::uint64_t compiles = 0;
  for (const std::string& daemon : daemons) {
    auto stats = Client(ClientOptions{daemon, std::chrono::seconds(30)}).stats();
    if (!stats) die("stats of " + daemon + ": " + stats.error().message);
    compiles += stats->compiles();
  }
  std::printf("compiles,failures,seconds\n%llu,%d,%.2f\n", static_cast<unsigned long long>(compiles), failures.load(), seconds);
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The remote tier measured: a remote hit against a direct HGET, and the stampede"};
  app.require_subcommand(1);
  std::string daemon, redis, secret, daemons, module_file;
  std::size_t size = 64 * 1024;
  int keys = 200, first = 0, clients = 16;
  auto* hit = app.add_subcommand("hit", "First and second fetch of remote entries, and a direct HGET");
  hit->add_option("--daemon", daemon)->required();
  hit->add_option("--redis", redis, "HOST:PORT")->required();
  hit->add_option("--secret", secret, "the fleet secret file")->required();
  hit->add_option("--size", size);
  hit->add_option("--keys", keys);
  auto* stampede = app.add_subcommand("stampede", "Identical compiles from every client of every daemon at once");
  stampede->add_option("--daemons", daemons, "ADDR,ADDR,...")->required();
  stampede->add_option("--module", module_file, "saxpy.ll")->required();
  stampede->add_option("--first", first);
  stampede->add_option("--keys", keys);
  stampede->add_option("--clients", clients);
  CLI11_PARSE(app, argc, argv);
  if (*hit) return run_hit(daemon, redis, secret, size, keys);
  std::vector<std::string> list;
  for (std::size_t at = 0; at <= daemons.size();) {
    std::size_t comma = std::min(daemons.find(',', at), daemons.size());
    list.push_back(daemons.substr(at, comma - at));
    at = comma + 1;
  }
  return run_stampede(list, first, keys, clients, read_all(module_file));
}
