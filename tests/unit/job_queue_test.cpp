// The worker pool runs jobs off the caller's thread and refuses work beyond its queue at once.
#include <gtest/gtest.h>

#include <future>
#include <latch>

#include "compile/compiler.hpp"
#include "kcache/process.hpp"
#include "worker/job_queue.hpp"

namespace kcache::server {
namespace {

TEST(JobQueue, RunsEveryQueuedJob) {
  std::atomic<int> done{0};
  {
    JobQueue pool(2, 100);
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(pool.submit([&] { ++done; }));
  }  // destruction drains the queue
  EXPECT_EQ(done, 50);
}

TEST(JobQueue, RefusesBeyondItsQueueImmediately) {
  JobQueue pool(1, 2);
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

TEST(JobQueue, IdleCountsFreeThreadsAndNoneWhileJobsWait) {
  JobQueue pool(2, 8);
  EXPECT_EQ(pool.idle(), 2u);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::latch running(2);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(pool.submit([&] {
      running.count_down();
      gate.wait();
    }));
  }
  running.wait();
  EXPECT_EQ(pool.idle(), 0u) << "a job still waits in the queue";
  release.set_value();
  pool.shutdown();
  EXPECT_EQ(pool.idle(), 0u) << "stopped: its threads are gone";
}

CompileJob job_for(Side side, std::vector<ImageRequest> images) {
  JobSpec spec;
  spec.side = side;
  return CompileJob{spec, {}, std::move(images)};
}

// What one part of a split job would return.
CompileOutput compiled(const CompileJob& part) {
  CompileOutput out;
  for (const ImageRequest& want : part.images) out.images.push_back(make_image(want, want.arch));
  out.diagnostics.push_back("warning for " + part.images.front().arch);
  return out;
}

TEST(SplitByArch, KeepsAnArchsImagesTogetherAndSpreadsArchsOverParts) {
  CompileJob job = job_for(Side::device, {{"sm_90", ImageKind::ptx}, {"sm_80", ImageKind::ptx},
                                          {"sm_90", ImageKind::cubin}, {"sm_75", ImageKind::cubin}});
  std::vector<CompileJob> parts = split_by_arch(job, 2);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].images, (std::vector<ImageRequest>{{"sm_90", ImageKind::ptx}, {"sm_90", ImageKind::cubin},
                                                          {"sm_75", ImageKind::cubin}}));
  EXPECT_EQ(parts[1].images, (std::vector<ImageRequest>{{"sm_80", ImageKind::ptx}}));
  EXPECT_EQ(split_by_arch(job, 8).size(), 3u) << "no more parts than archs";
  EXPECT_EQ(split_by_arch(job, 1).size(), 1u);
  EXPECT_EQ(split_by_arch(job, 0).size(), 1u) << "no free worker: one job that queues";
  EXPECT_EQ(split_by_arch(job_for(Side::host, {{"x86_64", ImageKind::object}}), 4).size(), 1u);
}

TEST(SplitByArch, MergedPartsGiveImagesInTheJobsOrder) {
  CompileJob job = job_for(Side::device, {{"sm_90", ImageKind::ptx}, {"sm_80", ImageKind::ptx},
                                          {"sm_90", ImageKind::cubin}, {"sm_75", ImageKind::cubin}});
  std::vector<CompileJob> parts = split_by_arch(job, 3);
  std::vector<Expected<CompileOutput>> outputs;
  for (const CompileJob& part : parts) outputs.emplace_back(compiled(part));
  auto merged = merge_parts(job, std::move(outputs));
  ASSERT_TRUE(merged) << merged.error().message;
  ASSERT_EQ(merged->images.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(merged->images[i].meta.id(), job.images[i]);
  EXPECT_EQ(merged->diagnostics.size(), 3u);
}

TEST(SplitByArch, OneFailedPartFailsTheJobAndAMissingImageIsInternal) {
  CompileJob job = job_for(Side::device, {{"sm_90", ImageKind::ptx}, {"sm_80", ImageKind::ptx}});
  std::vector<CompileJob> parts = split_by_arch(job, 2);
  std::vector<Expected<CompileOutput>> outputs;
  outputs.emplace_back(compiled(parts[0]));
  outputs.emplace_back(make_error(ErrorCode::k_deadline_exceeded, "sm_80 ran out of time"));
  auto merged = merge_parts(job, std::move(outputs));
  ASSERT_FALSE(merged);
  EXPECT_EQ(merged.error().code, ErrorCode::k_deadline_exceeded);

  std::vector<Expected<CompileOutput>> short_one;
  short_one.emplace_back(compiled(parts[0]));
  short_one.emplace_back(CompileOutput{});
  auto missing = merge_parts(job, std::move(short_one));
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::k_internal);
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
