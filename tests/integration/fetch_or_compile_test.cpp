// The load-time path: FetchOrCompile computes the key locally, fetches, compiles on a miss, and
// rides out a daemon restart.
#include <thread>

#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

using FetchOrCompile = DaemonTest;

// A client that retries for about 30 s: a daemon restarted on a busy 2-core machine (tests
// running beside it) can take several seconds to answer again, past the default's 4 s of backoff.
std::unique_ptr<Client> patient_client(const std::string& address) {
  ClientOptions options{address};
  options.max_attempts = 36;
  return std::make_unique<Client>(options);
}

TEST_F(FetchOrCompile, MissCompilesThenHitIsOneFetch) {
  v1::CompileRequest request = device_request(read_test_data("kernels/saxpy.ll"), {});
  auto first = m_client->fetch_or_compile(request, "sm_90");
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->image.arch(), "sm_90");
  EXPECT_NE(first->data.find(".entry saxpy"), std::string::npos);
  auto second = m_client->fetch_or_compile(request, "sm_90");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->data, first->data);
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->compiles(), 1u);
  EXPECT_EQ(stats->fetches(), 3u);  // miss, after compiling, hit
}

TEST_F(FetchOrCompile, RidesOutADaemonStoppedAndRestartedMidway) {
  std::string address = m_daemon->address();
  m_client = patient_client(address);
  ASSERT_EQ(m_daemon->stop(), 0);
  Expected<FetchedImage> result = make_error(ErrorCode::k_unknown, "not run");
  std::thread load([&] { result = m_client->fetch_or_compile(device_request(read_test_data("kernels/saxpy.ll"), {}), "sm_80"); });
  // The client is now retrying against a closed port; bring the daemon back on the same one.
  while (m_client->retries() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // Only the gRPC port is its own again: the HTTP port after it may have become another
  // connection's ephemeral port meanwhile (seen under ctest -j2).
  m_daemon = DaemonProcess::start(db(), m_dir.path() / "kcached.log", {"--http-listen", "off"}, address);
  load.join();
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(result->image.arch(), "sm_80");
  EXPECT_GT(m_client->retries(), 0u);
}

TEST_F(FetchOrCompile, ACompileRidesOutADaemonStoppedAndRestartedToo) {
  // compile() alone retries as fetch_or_compile does: a connection lost or refused is tried again
  // on a fresh channel.
  std::string address = m_daemon->address();
  m_client = patient_client(address);
  ASSERT_EQ(m_daemon->stop(), 0);
  Expected<v1::CompileResponse> result = make_error(ErrorCode::k_unknown, "not run");
  std::thread load([&] { result = m_client->compile(device_request(read_test_data("kernels/saxpy.ll"), {"sm_80"})); });
  while (m_client->retries() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  // Only the gRPC port is its own again: the HTTP port after it may have become another
  // connection's ephemeral port meanwhile (seen under ctest -j2).
  m_daemon = DaemonProcess::start(db(), m_dir.path() / "kcached.log", {"--http-listen", "off"}, address);
  load.join();
  ASSERT_TRUE(result) << result.error().message;
  ASSERT_EQ(result->images_size(), 1);
  EXPECT_NE(result->images(0).data().find(".entry saxpy"), std::string::npos);
}

TEST_F(FetchOrCompile, AnUnreachableDaemonIsNamedInTheError) {
  ClientOptions options{"127.0.0.1:1", std::chrono::seconds(5)};
  options.max_attempts = 2;
  Client client(options);
  auto r = client.fetch_or_compile(device_request(read_test_data("kernels/saxpy.ll"), {}), "sm_90");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::k_unavailable);
  EXPECT_NE(r.error().message.find("cannot reach kcached at 127.0.0.1:1"), std::string::npos) << r.error().message;
  EXPECT_EQ(client.retries(), 1u);
}

}  // namespace
}  // namespace kcache::test
