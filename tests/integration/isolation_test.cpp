// Compiles run in worker processes: a worker that crashes, exits, hangs or runs out of memory
// fails its one job with a clear error and is replaced; other jobs and the hit path go on. The
// faults come from kcached-faults' test hook (tests/support/fault_hook.cpp).
#include <fstream>
#include <future>
#include <thread>

#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

class Isolation : public DaemonTest {
 protected:
  std::vector<std::string> daemon_args() const override {
    return {"--workers", "2", "--job-timeout", "4", "--worker-memory", "2G"};
  }
  std::string daemon_executable() const override { return faulty_daemon_path(); }

  // saxpy with a fault marker in a comment: a different key, the same code.
  static v1::CompileRequest faulty(const std::string& marker) {
    return device_request("; " + marker + "\n" + read_test_data("kernels/saxpy.ll"), {"sm_90"});
  }

  v1::Stats stats() {
    auto s = m_client->stats();
    EXPECT_TRUE(s) << s.error().message;
    return s ? *s : v1::Stats{};
  }

  void expect_compiles(const std::string& module) {
    auto ok = m_client->compile(device_request(module, {"sm_80"}));
    ASSERT_TRUE(ok) << ok.error().message;
  }
};

TEST_F(Isolation, ACrashingWorkerFailsOneJobAndIsReplaced) {
  auto r = m_client->compile(faulty("kcache_test_fault_crash"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::k_internal) << r.error().message;
  EXPECT_NE(r.error().message.find("was killed by signal 11 (SIGSEGV"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("the worker compiling key "), std::string::npos) << r.error().message;
  EXPECT_EQ(stats().worker_crashes(), 1u);
  EXPECT_EQ(stats().entries(), 0u);

  // Both workers take jobs again (two at once, so the replacement is certainly used).
  std::vector<std::future<void>> jobs;
  for (int i = 0; i < 4; ++i) {
    jobs.push_back(std::async(std::launch::async,
                              [&, i] { expect_compiles(slow_device_module(10 + i)); }));
  }
  for (auto& j : jobs) j.get();
  EXPECT_EQ(stats().worker_restarts(), 1u);
  EXPECT_EQ(stats().entries(), 4u);
}

TEST_F(Isolation, AWorkerThatExitsNamesItsStatus) {
  auto r = m_client->compile(faulty("kcache_test_fault_exit"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::k_internal);
  EXPECT_NE(r.error().message.find("exited with status 3"), std::string::npos) << r.error().message;
  expect_compiles(read_test_data("kernels/saxpy.ll"));
}

TEST_F(Isolation, OtherJobsRunWhileOneCrashes) {
  auto crash = std::async(std::launch::async, [&] { return m_client->compile(faulty("kcache_test_fault_crash")); });
  expect_compiles(slow_device_module(30));
  auto crashed = crash.get();
  ASSERT_FALSE(crashed);
  EXPECT_EQ(crashed.error().code, ErrorCode::k_internal);
}

TEST_F(Isolation, AHangingWorkerIsKilledAtTheDeadlineAndHitsGoOnMeanwhile) {
  const std::string saxpy = read_test_data("kernels/saxpy.ll");
  expect_compiles(saxpy);
  auto hang_started = std::chrono::steady_clock::now();
  auto hang = std::async(std::launch::async, [&] { return m_client->compile(faulty("kcache_test_fault_hang")); });
  // While a worker hangs, hits are answered: they never wait for a worker.
  while (stats().running_jobs() == 0) std::this_thread::yield();
  for (int i = 0; i < 20; ++i) {
    auto hit = m_client->compile(device_request(saxpy, {"sm_80"}));
    ASSERT_TRUE(hit) << hit.error().message;
    EXPECT_EQ(hit->outcome(), v1::OUTCOME_HIT);
  }
  EXPECT_EQ(hang.wait_for(std::chrono::seconds(0)), std::future_status::timeout) << "the hits waited for the hang";
  auto hung = hang.get();
  ASSERT_FALSE(hung);
  EXPECT_EQ(hung.error().code, ErrorCode::k_deadline_exceeded) << hung.error().message;
  EXPECT_NE(hung.error().message.find("was killed"), std::string::npos) << hung.error().message;
  EXPECT_GE(std::chrono::steady_clock::now() - hang_started, std::chrono::seconds(4));
  expect_compiles(slow_device_module(5));
  EXPECT_EQ(stats().worker_crashes(), 1u);
}

// AddressSanitizer builds run workers without a memory limit (its shadow memory needs the whole
// address space), so the out-of-memory fault would take the machine's memory instead.
KCACHE_NOT_UNDER_ASAN(Isolation, AWorkerOutOfMemoryFailsItsJobWithResourceExhausted,
                      "workers have no memory limit to hit");
TEST_F(Isolation, AWorkerOutOfMemoryFailsItsJobWithResourceExhausted) {
  auto r = m_client->compile(faulty("kcache_test_fault_oom"));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::k_resource_exhausted) << r.error().message;
  EXPECT_NE(r.error().message.find("ran out of memory in its worker (limit 2147483648 bytes, --worker-memory)"),
            std::string::npos)
      << r.error().message;
  expect_compiles(read_test_data("kernels/saxpy.ll"));
  EXPECT_EQ(stats().worker_restarts(), 1u);
}

// Found by fuzz/module_fuzzer: 1.6 KB of bitcode whose attribute list makes LLVM's reader ask for
// 32 GiB. LLVM reports that to its bad-alloc handler, which would abort the worker; the worker's
// handler makes it the same clean RESOURCE_EXHAUSTED as any other allocation past the limit.
KCACHE_NOT_UNDER_ASAN(Isolation, BitcodeThatAsksLlvmForGigabytesIsResourceExhausted, "workers have no memory limit to hit");
TEST_F(Isolation, BitcodeThatAsksLlvmForGigabytesIsResourceExhausted) {
  v1::CompileRequest request = device_request(read_test_data("hostile/huge-attribute-list.bc"), {"sm_90"});
  request.set_format(v1::FORMAT_LLVM_BITCODE);
  auto r = m_client->compile(request);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::k_resource_exhausted) << r.error().message;
  EXPECT_NE(r.error().message.find("ran out of memory in its worker"), std::string::npos) << r.error().message;
  expect_compiles(read_test_data("kernels/saxpy.ll"));
  EXPECT_EQ(stats().worker_restarts(), 1u) << "a fresh worker took its place";
}

// The compile workers the daemon `pid` runs: its children started as `kcached --worker` (by any
// of its threads: /proc lists a child under the thread that started it).
std::size_t worker_processes(pid_t pid) {
  std::size_t workers = 0;
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
    std::ifstream children(task.path() / "children");
    for (pid_t child; children >> child;) {
      std::ifstream cmdline("/proc/" + std::to_string(child) + "/cmdline", std::ios::binary);
      std::string args((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
      if (args.find(std::string("\0--worker\0", 10)) != std::string::npos) ++workers;
    }
  }
  return workers;
}

// With two workers free, a job for two archs takes both: its archs compile at once (here both
// hang, so both stay running until the deadline kills them), and it fails as one job. Workers
// start as jobs first need them: one when the daemon starts (its toolchain checked against the
// daemon's), the second for the second arch, which is not counted as a restart.
TEST_F(Isolation, AJobsArchsCompileAtOnceOnFreeWorkers) {
  EXPECT_EQ(worker_processes(m_daemon->pid()), 1u) << "one worker at the start, not one per compile thread";
  expect_compiles(read_test_data("kernels/saxpy.ll"));
  EXPECT_EQ(worker_processes(m_daemon->pid()), 1u) << "one job at a time needs one worker";
  v1::CompileRequest request = device_request("; kcache_test_fault_hang\n" + read_test_data("kernels/saxpy.ll"),
                                              {"sm_80", "sm_90"});
  auto hang = std::async(std::launch::async, [&] { return m_client->compile(request); });
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  std::uint64_t most_running = 0;
  while (most_running < 2 && std::chrono::steady_clock::now() < until) {
    most_running = std::max<std::uint64_t>(most_running, stats().running_jobs());
  }
  EXPECT_EQ(most_running, 2u) << "one job for two archs ran on one worker";
  std::size_t workers = 0;  // the second arch's thread may be running, its worker not yet spawned
  while (workers < 2 && std::chrono::steady_clock::now() < until) workers = worker_processes(m_daemon->pid());
  EXPECT_EQ(workers, 2u) << "the second arch started the second worker";
  auto hung = hang.get();
  ASSERT_FALSE(hung);
  EXPECT_EQ(hung.error().code, ErrorCode::k_deadline_exceeded) << hung.error().message;
  EXPECT_EQ(stats().entries(), 1u) << "a job that failed in part stores nothing (saxpy's entry alone)";
  EXPECT_EQ(stats().compiles(), 1u);
  EXPECT_EQ(stats().worker_restarts(), 2u) << "the two hung workers were replaced, and nothing else counted";

  // The same split compiles: every image, in the order asked for, counted as one job.
  v1::CompileRequest three = device_request(slow_device_module(3), {"sm_90", "sm_80", "sm_75"});
  auto ok = m_client->compile(three);
  ASSERT_TRUE(ok) << ok.error().message;
  ASSERT_EQ(ok->images_size(), 3);
  EXPECT_EQ(ok->images(0).arch(), "sm_90");
  EXPECT_EQ(ok->images(1).arch(), "sm_80");
  EXPECT_EQ(ok->images(2).arch(), "sm_75");
  EXPECT_EQ(stats().compiles(), 2u);
  EXPECT_EQ(stats().images_compiled(), 4u);
}

// One worker and a one-second job limit: jobs queued behind a hanging one are past their
// deadline by the time the worker is free.
class QueuedJobs : public Isolation {
 protected:
  std::vector<std::string> daemon_args() const override {
    return {"--workers", "1", "--job-timeout", "1", "--queue-depth", "8"};
  }
};

// A job whose deadline passed while it waited in the queue fails with DEADLINE_EXCEEDED without
// reaching a worker: no worker is killed and replaced for it.
TEST_F(QueuedJobs, AJobThatExpiredInTheQueueNeverReachesAWorker) {
  auto hang = std::async(std::launch::async, [&] { return m_client->compile(faulty("kcache_test_fault_hang")); });
  while (stats().running_jobs() == 0) std::this_thread::yield();
  std::vector<std::future<Expected<v1::CompileResponse>>> queued;
  for (int i = 0; i < 3; ++i) {
    queued.push_back(std::async(std::launch::async, [&, i] {
      return m_client->compile(device_request(slow_device_module(40 + i), {"sm_80"}));
    }));
  }
  ASSERT_FALSE(hang.get());
  int not_started = 0;
  for (auto& q : queued) {
    auto r = q.get();
    ASSERT_FALSE(r) << "a job queued behind a hang for its whole time limit compiled";
    EXPECT_EQ(r.error().code, ErrorCode::k_deadline_exceeded) << r.error().message;
    if (r.error().message.find("was not started") != std::string::npos) ++not_started;
  }
  EXPECT_GE(not_started, 2);
  // The hanging job's worker, and at most the first queued one (if it still had a moment left).
  EXPECT_LE(stats().worker_crashes(), 2u);
  expect_compiles(read_test_data("kernels/saxpy.ll"));
}

// One worker, on a CUDA root whose ptxas is a script in front of the real one. Workers reuse what
// the daemon's ptxas answered only while its file is the same (ToolRuns): one started after
// ptxas changed must detect another toolchain, and kcached must refuse it.
class ToolkitChange : public Isolation {
 protected:
  void SetUp() override {
    m_ptxas = ptxas_path();
    if (m_ptxas.empty()) GTEST_SKIP() << "no CUDA toolkit: /usr/local/cuda/bin/ptxas is absent";
    std::filesystem::create_directories(cuda_root() / "bin");
    install_ptxas("exec '" + m_ptxas.string() + "' \"$@\"\n");
    Isolation::SetUp();
  }
  std::vector<std::string> daemon_args() const override {
    return {"--workers", "1", "--cuda-root", cuda_root().string(), "--cubin-assembler", "ptxas"};
  }
  std::filesystem::path cuda_root() const { return m_dir.path() / "cuda"; }

  // Puts a script at cuda_root()/bin/ptxas as a package upgrade would: a new file renamed over it.
  void install_ptxas(const std::string& body) {
    std::filesystem::path tmp = cuda_root() / "bin" / "ptxas.new";
    write_file(tmp, "#!/bin/sh\n" + body);
    std::filesystem::permissions(tmp, std::filesystem::perms::owner_all);
    std::filesystem::rename(tmp, cuda_root() / "bin" / "ptxas");
  }

  std::filesystem::path m_ptxas;
};

TEST_F(ToolkitChange, AWorkerStartedAfterPtxasChangedIsRefused) {
  auto before = m_client->compile(device_request(read_test_data("kernels/saxpy.ll"), {"sm_90"}, {v1::KIND_CUBIN}));
  ASSERT_TRUE(before) << before.error().message;

  // Another ptxas release; then the only worker crashes, and its replacement detects afresh.
  install_ptxas("if [ \"$1\" = --version ]; then '" + m_ptxas.string() +
                "' --version | sed 's/, V/, V1/'; exit; fi\nexec '" + m_ptxas.string() + "' \"$@\"\n");
  ASSERT_FALSE(m_client->compile(faulty("kcache_test_fault_crash")));
  auto after = m_client->compile(device_request(read_test_data("kernels/saxpy.ll"), {"sm_80"}));
  ASSERT_FALSE(after) << "a worker with another ptxas compiled for this daemon";
  EXPECT_EQ(after.error().code, ErrorCode::k_failed_precondition) << after.error().message;
  EXPECT_NE(after.error().message.find("the toolkit changed under the daemon; restart kcached"), std::string::npos)
      << after.error().message;
}

}  // namespace
}  // namespace kcache::test
