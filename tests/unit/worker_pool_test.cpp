// The worker pool runs jobs off the caller's thread and refuses work beyond its queue at once.
#include <gtest/gtest.h>

#include <future>
#include <latch>

#include "compile/process.hpp"
#include "worker_pool.hpp"

namespace kcache::server {
namespace {

TEST(WorkerPool, RunsEveryQueuedJob) {
  std::atomic<int> done{0};
  {
    WorkerPool pool(2, 100);
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(pool.submit([&] { ++done; }));
  }  // destruction drains the queue
  EXPECT_EQ(done, 50);
}

TEST(WorkerPool, RefusesBeyondItsQueueImmediately) {
  WorkerPool pool(1, 2);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::latch running(1);
  ASSERT_TRUE(pool.submit([&] {
    running.count_down();
    gate.wait();
  }));
  running.wait();  // the one worker is busy
  ASSERT_TRUE(pool.submit([gate] { gate.wait(); }));
  ASSERT_TRUE(pool.submit([gate] { gate.wait(); }));
  EXPECT_EQ(pool.queue_depth(), 2u);
  auto refused = pool.submit([] {});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::k_resource_exhausted);
  EXPECT_NE(refused.error().message.find("retry"), std::string::npos);
  release.set_value();
  pool.shutdown();
  auto after = pool.submit([] {});
  ASSERT_FALSE(after);
  EXPECT_EQ(after.error().code, ErrorCode::k_unavailable);
}

TEST(RunProcess, CapturesOutputAndKillsAProgramPastItsDeadline) {
  auto echo = run_process({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(echo);
  EXPECT_EQ(echo->exit_code, 3);
  EXPECT_NE(echo->output.find("out"), std::string::npos);
  EXPECT_NE(echo->output.find("err"), std::string::npos);

  auto start = std::chrono::steady_clock::now();
  auto slow = run_process({"/bin/sleep", "30"}, start + std::chrono::milliseconds(200));
  ASSERT_FALSE(slow);
  EXPECT_EQ(slow.error().code, ErrorCode::k_deadline_exceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));

  auto missing = run_process({"/nonexistent/ptxas"});
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::k_failed_precondition);
}

}  // namespace
}  // namespace kcache::server
