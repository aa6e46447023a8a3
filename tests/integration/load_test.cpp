// Under load: 200 identical compiles at once, a mixed load from 32 threads, overload, and a
// size cap filled several times over. Real daemon, real RocksDB, loopback.
#include <atomic>
#include <future>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

// saxpy made distinct by a comment: a different key, the same PTX.
v1::CompileRequest variant(const std::string& tag, const std::string& arch = "sm_80") {
  static const std::string saxpy = read_test_data("kernels/saxpy.ll");
  v1::CompileRequest r;
  r.set_side(v1::SIDE_DEVICE);
  r.set_module("; " + tag + "\n" + saxpy);
  r.add_archs(arch);
  r.add_emit(v1::KIND_PTX);
  return r;
}

using Load = DaemonTest;

TEST_F(Load, TwoHundredIdenticalCompilesRunOnceAndAllGetTheSameBytes) {
  constexpr int k_clients = 200;
  v1::CompileRequest request = device_request(slow_device_module(100), {"sm_90"});
  std::vector<Expected<v1::CompileResponse>> results(k_clients, make_error(ErrorCode::k_unknown, "not run"));
  std::vector<std::thread> clients;
  for (int i = 0; i < k_clients; ++i) {
    clients.emplace_back([&, i] { results[i] = m_client->compile(request); });
  }
  for (std::thread& t : clients) t.join();
  int misses = 0, coalesced = 0;
  for (const auto& r : results) {
    ASSERT_TRUE(r) << r.error().message;
    ASSERT_EQ(r->images_size(), 1);
    EXPECT_EQ(r->images(0).data(), results[0]->images(0).data());
    misses += r->outcome() == v1::OUTCOME_MISS;
    coalesced += r->outcome() == v1::OUTCOME_COALESCED;
  }
  EXPECT_EQ(misses, 1);
  EXPECT_GT(coalesced, 0);
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->compiles(), 1u);
  EXPECT_EQ(stats->coalesced(), static_cast<std::uint64_t>(coalesced));
  EXPECT_EQ(stats->hits() + stats->coalesced() + stats->misses(), static_cast<std::uint64_t>(k_clients));
}

class MixedLoad : public DaemonTest {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--queue-depth", "64"}; }
};

TEST_F(MixedLoad, HitsMissesAndBadInputFrom32ThreadsForABoundedTimeGiveNoUnexpectedError) {
  constexpr int k_threads = 32;
  constexpr int k_warm = 8;
  std::vector<std::string> warm_keys;
  for (int i = 0; i < k_warm; ++i) {
    auto r = m_client->compile(variant("warm " + std::to_string(i)));
    ASSERT_TRUE(r) << r.error().message;
    warm_keys.push_back(r->key());
  }
  std::atomic<int> hits{0}, misses{0}, refused{0}, fetched{0};
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  auto fail = [&](const std::string& what) {
    std::lock_guard lock(failures_mutex);
    failures.push_back(what);
  };
  const auto stop_at = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<unsigned>(t));
      for (int n = 0; std::chrono::steady_clock::now() < stop_at; ++n) {
        int pick = static_cast<int>(rng() % 10);
        if (pick < 5) {  // a hit
          auto r = m_client->compile(variant("warm " + std::to_string(rng() % k_warm)));
          if (!r) fail("hit: " + r.error().message);
          else if (r->outcome() != v1::OUTCOME_HIT) fail("a warm module was not a hit");
          else ++hits;
        } else if (pick < 7) {  // a miss
          auto r = m_client->compile(variant("cold " + std::to_string(t) + "." + std::to_string(n)));
          if (!r) fail("miss: " + r.error().message);
          else ++misses;
        } else if (pick < 8) {  // a fetch
          v1::FetchRequest f;
          f.set_key(warm_keys[rng() % k_warm]);
          f.set_arch("sm_80");
          auto r = m_client->fetch(f);
          if (!r) fail("fetch: " + r.error().message);
          else ++fetched;
        } else {  // bad input, refused with INVALID_ARGUMENT
          v1::CompileRequest bad = variant("bad");
          bad.set_module("define void @f() {\n  ret i32 zork\n}\n; " + std::to_string(n));
          auto r = m_client->compile(bad);
          if (r) fail("bad input accepted");
          else if (r.error().code != ErrorCode::k_invalid_argument) fail("bad input: " + r.error().message);
          else ++refused;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " unexpected errors, the first: " << failures.front();
  EXPECT_GT(hits, 0);
  EXPECT_GT(misses, 0);
  EXPECT_GT(refused, 0);
  EXPECT_GT(fetched, 0);
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->errors(), static_cast<std::uint64_t>(refused.load()));
  EXPECT_EQ(stats->worker_crashes(), 0u);
}

class Overload : public DaemonTest {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--workers", "1", "--queue-depth", "2"}; }
};

TEST_F(Overload, BeyondTheQueueIsResourceExhaustedAtOnceThenItRecovers) {
  constexpr int k_jobs = 12;
  std::vector<std::future<std::pair<Expected<v1::CompileResponse>, std::chrono::milliseconds>>> jobs;
  for (int i = 0; i < k_jobs; ++i) {
    jobs.push_back(std::async(std::launch::async, [&, i] {
      auto start = std::chrono::steady_clock::now();
      auto r = m_client->compile(device_request(slow_device_module(60 + i), {"sm_90"}));
      return std::pair{std::move(r), std::chrono::duration_cast<std::chrono::milliseconds>(
                                         std::chrono::steady_clock::now() - start)};
    }));
  }
  int ok = 0, exhausted = 0;
  std::chrono::milliseconds slowest_refusal{0}, fastest_success = std::chrono::hours(1);
  for (auto& j : jobs) {
    auto [r, took] = j.get();
    if (r) {
      ++ok;
      fastest_success = std::min(fastest_success, took);
      continue;
    }
    ASSERT_EQ(r.error().code, ErrorCode::k_resource_exhausted) << r.error().message;
    EXPECT_NE(r.error().message.find("retry after a short backoff"), std::string::npos) << r.error().message;
    ++exhausted;
    slowest_refusal = std::max(slowest_refusal, took);
  }
  EXPECT_GE(ok, 1);
  EXPECT_GE(exhausted, 1);
  EXPECT_EQ(ok + exhausted, k_jobs);
  EXPECT_LT(slowest_refusal, fastest_success) << "refusals must come at once, not after a wait";
  // Recovered: the queue is empty and the next job compiles.
  auto again = m_client->compile(device_request(slow_device_module(3), {"sm_90"}));
  ASSERT_TRUE(again) << again.error().message;
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->queued_jobs(), 0u);
}

class SizeCap : public DaemonTest {
 protected:
  static constexpr std::uint64_t k_cap = 8 * 1024;  // about nine saxpy PTX images
  std::vector<std::string> daemon_args() const override { return {"--max-size", std::to_string(k_cap)}; }
};

TEST_F(SizeCap, FillingTheCapSeveralTimesOverKeepsUsageUnderItAndTheHotSetCached) {
  constexpr int k_cold = 80;
  constexpr int k_hot = 3;
  int hot_hits = 0, hot_asks = 0;
  std::uint64_t stored = 0;
  for (int i = 0; i < k_cold; ++i) {
    auto cold = m_client->compile(variant("cold " + std::to_string(i)));
    ASSERT_TRUE(cold) << cold.error().message;
    stored += cold->images(0).size();
    auto hot = m_client->compile(variant("hot " + std::to_string(i % k_hot)));
    ASSERT_TRUE(hot) << hot.error().message;
    if (i >= k_hot) {
      ++hot_asks;
      hot_hits += hot->outcome() == v1::OUTCOME_HIT;
    }
    auto stats = m_client->stats();
    ASSERT_TRUE(stats);
    ASSERT_LE(stats->bytes(), k_cap) << "after " << i + 1 << " cold compiles";
  }
  EXPECT_GE(stored, 4 * k_cap) << "the test must fill the cap several times over";
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_GT(stats->evictions(), 0u);
  EXPECT_EQ(stats->errors(), 0u);
  EXPECT_EQ(stats->max_bytes(), k_cap);
  EXPECT_GE(hot_hits * 10, hot_asks * 9) << hot_hits << " hits of " << hot_asks;
}

}  // namespace
}  // namespace kcache::test
