#include "daemon_fixture.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

extern char** environ;

namespace kcache::test {

namespace {
// KCACHE_NOT_UNDER_ASAN's tests, by "Suite.Name", and why each does not apply there.
std::map<std::string, std::string>& tests_not_under_asan() {
  static std::map<std::string, std::string> tests;
  return tests;
}
}  // namespace

bool not_under_asan(const std::string& test, const std::string& why) {
  tests_not_under_asan().emplace(test, why);
  return true;
}

void DaemonTest::SetUp() {
  if (k_asan_build) {
    const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
    auto it = tests_not_under_asan().find(std::string(test->test_suite_name()) + "." + test->name());
    if (it != tests_not_under_asan().end()) GTEST_SKIP() << "AddressSanitizer build: " << it->second;
  }
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
  if (const char* shared = shared_daemon_file(); shared != nullptr && HasFailure()) {
    // The daemon's log is the shared one: SharedDaemon.Stop keeps its folder when a file there
    // names a test that failed.
    try {
      SharedDaemon d = read_shared_daemon(shared);
      const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
      std::ofstream(d.folder / "failed", std::ios::app) << test->test_suite_name() << "." << test->name() << "\n";
      std::fprintf(stderr, "kept %s; the shared daemon's log and database: %s (kcached.log, db/)\n",
                   m_dir.path().c_str(), d.folder.c_str());
      return;
    } catch (const std::exception&) {
      // SetUp found no shared daemon, and said so.
    }
  }
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

// One kcached for the tests tests/shared_daemon.cmake lists: tests that would answer the same on
// a daemon other tests have used (no counts, no cold cache, no restart, no flags of their own).
// Each test is a process of its own under ctest, so the daemon is a ctest fixture:
// SharedDaemon.Start (FIXTURES_SETUP) starts a kcached that outlives it and writes down where it
// is, the listed tests attach to it (DaemonTest::SetUp), and SharedDaemon.Stop (FIXTURES_CLEANUP)
// stops it, expecting a clean exit and no sanitizer report in its log. Under the sanitizers that
// exit runs LeakSanitizer over a daemon that served every listed test.
//
// A daemon start and stop is 0.46 CPU-s, 0.96 under the sanitizers, with its first worker.
namespace kcache::test {

const char* shared_daemon_file() { return std::getenv("KCACHE_SHARED_DAEMON"); }

SharedDaemon read_shared_daemon(const std::filesystem::path& file) {
  std::ifstream in(file);
  SharedDaemon d;
  std::string folder;
  if (!(in >> d.port >> d.pid >> d.keeper) || !std::getline(in >> std::ws, folder) || folder.empty()) {
    throw std::runtime_error("no shared daemon is written down in " + file.string() +
                             ": ctest runs SharedDaemon.Start before the tests that need it");
  }
  d.folder = folder;
  return d;
}

namespace {

constexpr const char* k_skipped =
    "ctest starts and stops the daemon that the tests in tests/shared_daemon.cmake share "
    "(KCACHE_SHARED_DAEMON); run by hand, each of them starts its own";

int process_fd(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }

// Decimal digits of `n` into `out` (async-signal-safe, for the keeper); their count.
std::size_t format_number(long n, char* out) {
  char digits[24];
  std::size_t count = 0;
  bool negative = n < 0;
  unsigned long v = negative ? static_cast<unsigned long>(-n) : static_cast<unsigned long>(n);
  do {
    digits[count++] = static_cast<char>('0' + v % 10);
    v /= 10;
  } while (v != 0);
  std::size_t size = 0;
  if (negative) out[size++] = '-';
  while (count > 0) out[size++] = digits[--count];
  return size;
}

// What the keeper needs, made before it forks: it runs only async-signal-safe calls, since it is
// a fork of a test process.
struct KeeperPlan {
  std::vector<std::string> args;
  std::vector<char*> argv;
  std::string log, status;
  pid_t watched = -1;  // ctest: when it goes, the daemon goes
  int stdout_write = -1, pids_write = -1;
};

// The keeper: the daemon's parent, in a session of its own. It starts kcached (killed if the
// keeper dies), tells the starter both pids, then waits for kcached to exit, stopping it if ctest
// goes first (SIGTERM, then SIGKILL after 30 s), and writes down its exit status.
[[noreturn]] void keep(const KeeperPlan& plan) {
  int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  // ctest reads the test's output until every copy of it is closed: none may stay here.
  if (null < 0 || ::dup2(null, STDIN_FILENO) < 0 || ::dup2(null, STDOUT_FILENO) < 0 || ::dup2(null, STDERR_FILENO) < 0) {
    _exit(1);
  }
  const int watched = plan.watched > 0 ? process_fd(plan.watched) : -1;
  const pid_t self = ::getpid();
  const pid_t daemon = ::fork();
  if (daemon == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != self) _exit(127);
    int log = ::open(plan.log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (log < 0 || ::dup2(plan.stdout_write, STDOUT_FILENO) < 0 || ::dup2(log, STDERR_FILENO) < 0) _exit(127);
    ::execve(plan.argv[0], plan.argv.data(), environ);
    _exit(127);
  }
  ::close(plan.stdout_write);
  char text[64];
  std::size_t size = format_number(daemon, text);
  text[size++] = ' ';
  size += format_number(self, text + size);
  if (::write(plan.pids_write, text, size) < 0) _exit(1);
  ::close(plan.pids_write);
  if (daemon < 0) _exit(1);

  const int daemon_fd = process_fd(daemon);
  pollfd fds[2] = {{daemon_fd, POLLIN, 0}, {watched, POLLIN, 0}};
  nfds_t count = watched >= 0 ? 2 : 1;
  bool stopping = false;
  while (daemon_fd >= 0) {
    int n = ::poll(fds, count, stopping ? 30'000 : -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[0].revents & POLLIN) != 0) break;
    if (n == 0) {
      ::kill(daemon, SIGKILL);
      break;
    }
    if (count == 2 && fds[1].revents != 0) {
      ::kill(daemon, SIGTERM);
      stopping = true;
      count = 1;
    }
  }
  int status = 0;
  while (::waitpid(daemon, &status, 0) < 0 && errno == EINTR) {
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  int out = ::open(plan.status.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  size = format_number(code, text);
  if (out >= 0 && ::write(out, text, size) < 0) _exit(1);
  _exit(0);
}

// Reads `fd` until end of file, or until `enough` says what was read suffices, for up to `limit`.
std::string read_until(int fd, std::chrono::seconds limit, bool (*enough)(const std::string&)) {
  std::string text;
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!enough(text)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[256];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  return text;
}

// Starts kcached under a keeper in `folder`, as DaemonProcess::start would (the same flags), but
// outliving this process: what to write down about it.
SharedDaemon start_kept_daemon(const std::filesystem::path& folder) {
  KeeperPlan plan;
  plan.args = {KCACHE_DAEMON_PATH, "--listen", "127.0.0.1:0", "--db", (folder / "db").string(), "--log-level", "debug"};
  for (std::string& a : plan.args) plan.argv.push_back(a.data());
  plan.argv.push_back(nullptr);
  plan.log = (folder / "kcached.log").string();
  plan.status = (folder / "exit-status").string();
  plan.watched = ::getppid();
  int out[2], pids[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(pids, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  plan.stdout_write = out[1];
  plan.pids_write = pids[1];

  const pid_t first = ::fork();
  if (first == 0) {
    ::close(out[0]);
    ::close(pids[0]);
    ::setsid();
    const pid_t keeper = ::fork();
    if (keeper == 0) keep(plan);
    _exit(keeper < 0 ? 1 : 0);
  }
  ::close(out[1]);
  ::close(pids[1]);
  if (first < 0) throw std::runtime_error(std::string("cannot fork: ") + std::strerror(errno));
  if (wait_status(first) != 0) throw std::runtime_error("cannot start the shared daemon's keeper");

  SharedDaemon d;
  d.folder = folder;
  std::istringstream ids(read_until(pids[0], std::chrono::seconds(10), [](const std::string&) { return false; }));
  ::close(pids[0]);
  // "kcached listening on port N": a condition, not a sleep.
  std::string line = read_until(out[0], std::chrono::seconds(60),
                                [](const std::string& t) { return t.find('\n') != std::string::npos; });
  ::close(out[0]);
  auto pos = line.find("port ");
  if (!(ids >> d.pid >> d.keeper) || d.pid <= 0 || pos == std::string::npos) {
    if (d.pid > 0) ::kill(d.pid, SIGKILL);
    std::string log = read_file(folder / "kcached.log");
    throw std::runtime_error("the shared kcached did not start; its log:\n" + log.substr(log.size() > 4000 ? log.size() - 4000 : 0));
  }
  d.port = std::stoi(line.substr(pos + 5));
  return d;
}

TEST(SharedDaemon, Start) {
  const char* file = shared_daemon_file();
  if (file == nullptr) GTEST_SKIP() << k_skipped;
  std::filesystem::remove(file);
  TempDir folder;
  folder.keep();  // SharedDaemon.Stop removes it
  SharedDaemon d = start_kept_daemon(folder.path());
  Client client(ClientOptions{"127.0.0.1:" + std::to_string(d.port), std::chrono::seconds(60)});
  auto caps = client.capabilities();
  ASSERT_TRUE(caps) << caps.error().message;
  // Written whole, then renamed: a test never reads half of it.
  std::string partial = std::string(file) + ".partial";
  write_file(partial, std::to_string(d.port) + " " + std::to_string(d.pid) + " " + std::to_string(d.keeper) + " " +
                          d.folder.string() + "\n");
  std::filesystem::rename(partial, file);
  std::printf("shared kcached (pid %d) on port %d, in %s\n", static_cast<int>(d.pid), d.port, d.folder.c_str());
}

TEST(SharedDaemon, Stop) {
  const char* file = shared_daemon_file();
  if (file == nullptr) GTEST_SKIP() << k_skipped;
  SharedDaemon d = read_shared_daemon(file);
  std::filesystem::remove(file);
  // The keeper writes down the exit status, then exits: that exit is what to wait for.
  const int keeper = process_fd(d.keeper);
  Client client(ClientOptions{"127.0.0.1:" + std::to_string(d.port), std::chrono::seconds(60)});
  auto stats = client.stats();
  EXPECT_TRUE(stats) << "the shared daemon stopped serving before the tests that share it ended: "
                     << stats.error().message;
  ::kill(d.pid, SIGTERM);
  if (keeper >= 0) {
    pollfd p{keeper, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 60'000), 1) << "kcached did not stop within 60 s of SIGTERM";
    ::close(keeper);
  }
  const std::string status = read_file(d.folder / "exit-status");
  const std::string log = read_file(d.folder / "kcached.log");
  const std::string log_end = log.substr(log.size() > 4000 ? log.size() - 4000 : 0);
  EXPECT_EQ(status, "0") << "kcached did not shut down cleanly on SIGTERM; its log's end:\n" << log_end;
  for (const char* report : {"ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:"}) {
    auto at = log.find(report);
    EXPECT_EQ(at, std::string::npos) << log.substr(at == std::string::npos ? 0 : at, 4000);
  }
  const bool a_test_failed = std::filesystem::exists(d.folder / "failed");  // DaemonTest::TearDown's
  if (!::testing::Test::HasFailure() && !a_test_failed && std::getenv("KCACHE_KEEP_TEST_DIRS") == nullptr) {
    std::error_code ec;
    std::filesystem::remove_all(d.folder, ec);
  } else {
    std::fprintf(stderr, "kept %s (kcached.log, db/)\n", d.folder.c_str());
  }
}

}  // namespace
}  // namespace kcache::test
