#include "daemon_fixture.hpp"

namespace kcache::test {

void DaemonTest::SetUp() {
  if (const char* shared = shared_daemon_file()) {
    ASSERT_TRUE(daemon_args().empty() && daemon_executable().empty())
        << "this test's daemon has flags of its own: take it out of tests/shared_daemon.cmake";
    SharedDaemon d = read_shared_daemon(shared);
    m_daemon = DaemonProcess::attach(d.port, d.pid);
  } else {
    m_daemon = DaemonProcess::start(db(), m_dir.path() / "kcached.log", daemon_args(), "127.0.0.1:0", daemon_executable());
  }
  m_client = std::make_unique<Client>(ClientOptions{m_daemon->address(), std::chrono::seconds(120)});
}

void DaemonTest::TearDown() {
  // KCACHE_KEEP_TEST_DIRS=1 keeps every test's folder, for reading daemon logs of passing tests.
  if (!HasFailure() && std::getenv("KCACHE_KEEP_TEST_DIRS") == nullptr) return;
  m_dir.keep();
  std::fprintf(stderr, "kept %s (kcached.log, db/)\n", m_dir.path().c_str());
}

void DaemonTest::restart() {
  ASSERT_EQ(m_daemon->stop(), 0) << "kcached did not shut down cleanly on SIGTERM";
  m_daemon = DaemonProcess::start(db(), m_dir.path() / "kcached.log", daemon_args(), "127.0.0.1:0", daemon_executable());
  m_client = std::make_unique<Client>(ClientOptions{m_daemon->address(), std::chrono::seconds(120)});
}

std::string DaemonTest::own_module(const std::string& text_ir) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  return text_ir + "\n; a module of " + test->test_suite_name() + "." + test->name() + "'s own\n";
}

v1::CompileRequest device_request(const std::string& module, const std::vector<std::string>& archs,
                                  std::vector<v1::ImageKind> emit) {
  v1::CompileRequest r;
  r.set_side(v1::SIDE_DEVICE);
  r.set_module(module);
  for (const std::string& a : archs) r.add_archs(a);
  for (v1::ImageKind k : emit) r.add_emit(k);
  return r;
}

void expect_quick_refusal(const std::vector<std::string>& args, const std::string& server, int code,
                          const std::string& message) {
  std::string command = "kcache";
  for (const std::string& a : args) command += " " + a;
  SCOPED_TRACE(command);
  constexpr std::uint64_t k_mib = 1ULL << 20;
  BoundedRun r = run_cli_bounded(args, server, std::chrono::seconds(10), 512 * k_mib);
  EXPECT_FALSE(r.killed) << "killed after " << r.elapsed.count() << " ms, at " << r.peak_rss / k_mib << " MiB";
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  // Under ASan everything runs slower, and its shadow memory counts as resident.
  EXPECT_LT(r.elapsed, k_asan_build ? std::chrono::seconds(5) : std::chrono::seconds(1));
  if (!k_asan_build) {
    EXPECT_LT(r.peak_rss, 100 * k_mib);
  }
}

Expected<v1::CompileResponse> DaemonTest::compile_patiently(const v1::CompileRequest& request) {
  for (auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);;) {
    auto r = m_client->compile(request);
    if (r || r.error().code != ErrorCode::k_deadline_exceeded || std::chrono::steady_clock::now() > deadline) return r;
  }
}

}  // namespace kcache::test
