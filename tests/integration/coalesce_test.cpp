// One compile per key: identical concurrent requests share the first one's compile.
#include <thread>

#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

using Coalescing = DaemonTest;

TEST_F(Coalescing, ConcurrentIdenticalCompilesRunOnce) {
  constexpr int k_clients = 32;
  v1::CompileRequest request = device_request(slow_device_module(100), {"sm_90"});
  std::vector<Expected<v1::CompileResponse>> results(k_clients, make_error(ErrorCode::k_unknown, "not run"));
  std::vector<std::thread> clients;
  for (int i = 0; i < k_clients; ++i) {
    clients.emplace_back([&, i] { results[i] = m_client->compile(request); });
  }
  for (std::thread& t : clients) t.join();
  int misses = 0, coalesced = 0, hits = 0;
  for (const auto& r : results) {
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->images(0).data(), results[0]->images(0).data());
    misses += r->outcome() == v1::OUTCOME_MISS;
    coalesced += r->outcome() == v1::OUTCOME_COALESCED;
    hits += r->outcome() == v1::OUTCOME_HIT;
  }
  EXPECT_EQ(misses, 1);
  EXPECT_EQ(coalesced + hits, k_clients - 1);
  EXPECT_GT(coalesced, 0);
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->compiles(), 1u);
  EXPECT_EQ(stats->coalesced(), static_cast<std::uint64_t>(coalesced));
  EXPECT_EQ(stats->misses(), 1u);
}

}  // namespace
}  // namespace kcache::test
