// Crash safety: kcached is killed with SIGKILL while clients keep compiling. After each kill the
// database verifies clean offline (kcached --verify: nothing torn), and after a restart every
// compile that was acknowledged is there, whole, with the bytes it was acknowledged with.
#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "daemon_fixture.hpp"
#include "kcache/sha256.hpp"

namespace kcache::test {
namespace {

using CrashSafety = DaemonTest;

TEST_F(CrashSafety, KillNineDuringSustainedWritesLosesNothingAcknowledged) {
  static const std::string saxpy = read_test_data("kernels/saxpy.ll");
  constexpr int k_rounds = 3;
  constexpr int k_writers = 4;
  constexpr int k_acks_before_kill = 12;
  std::mutex acked_mutex;
  std::map<std::string, std::string> acked;  // key -> SHA-256 of its sm_80 PTX

  for (int round = 0; round < k_rounds; ++round) {
    std::atomic<bool> stop{false};
    std::atomic<int> acks{0};
    std::vector<std::thread> writers;
    // Calls the kill ends fail at once: a retry would only wait for a daemon that is gone.
    ClientOptions options{m_daemon->address(), std::chrono::seconds(120)};
    options.max_attempts = 1;
    Client writer(options);
    for (int w = 0; w < k_writers; ++w) {
      writers.emplace_back([&, w] {
        for (int n = 0; !stop; ++n) {
          v1::CompileRequest r = device_request(
              "; round " + std::to_string(round) + " writer " + std::to_string(w) + " n " + std::to_string(n) + "\n" +
                  saxpy,
              {"sm_80"});
          auto done = writer.compile(r);
          if (!done) continue;  // the kill: never acknowledged, so nothing is promised
          std::lock_guard lock(acked_mutex);
          acked[done->key()] = done->images(0).sha256();
          ++acks;
          acks.notify_all();
        }
      });
    }
    for (int seen = acks; seen < k_acks_before_kill; seen = acks) acks.wait(seen);  // asleep, not spinning
    m_daemon->kill9();  // mid-stream: writers have calls in flight
    stop = true;
    for (std::thread& t : writers) t.join();

    CommandResult verify = run_program({KCACHE_DAEMON_PATH, "--verify", "--db", db().string()});
    EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
    EXPECT_NE(verify.out.find(" 0 bad"), std::string::npos) << verify.out;

    m_daemon = DaemonProcess::start(db(), m_dir.path() / "kcached.log", daemon_args());
    m_client = std::make_unique<Client>(ClientOptions{m_daemon->address(), std::chrono::seconds(120)});
    std::lock_guard lock(acked_mutex);
    for (const auto& [key, digest] : acked) {
      v1::FetchRequest f;
      f.set_key(key);
      f.set_arch("sm_80");
      auto image = m_client->fetch(f);
      ASSERT_TRUE(image) << "round " << round << ": acknowledged key " << key << " is gone: " << image.error().message;
      EXPECT_EQ(to_hex(sha256(image->data)), digest) << key;
    }
    auto stats = m_client->stats();
    ASSERT_TRUE(stats);
    EXPECT_GE(stats->entries(), acked.size());
  }
}

}  // namespace
}  // namespace kcache::test
