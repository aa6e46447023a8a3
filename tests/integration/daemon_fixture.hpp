// A test fixture with a real kcached on a loopback port, its RocksDB in a temp folder, and a
// client. A failing test keeps the folder (database and daemon log) and prints its path.
//
// Under ctest, the tests tests/shared_daemon.cmake lists share one kcached instead (the ctest
// fixture at the end of daemon_fixture.cpp): tests that would answer the same on a daemon other
// tests have used. Run by hand (without KCACHE_SHARED_DAEMON), every test starts its own.
#pragma once

#include <gtest/gtest.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "kcache/client.hpp"
#include "test_support.hpp"

namespace kcache::test {

// A device compile request for `module` (text IR unless format says otherwise).
v1::CompileRequest device_request(const std::string& module, const std::vector<std::string>& archs,
                                  std::vector<v1::ImageKind> emit = {v1::KIND_PTX});

// Runs the kcache CLI on a hostile input (a FIFO, /dev/zero, a file past its limit) and expects
// a clear, cheap refusal: exit `code` and `message` on stderr, within a second and 100 MiB. The
// CLI is killed at 10 s or 512 MiB, so a regression fails the test rather than hangs it.
void expect_quick_refusal(const std::vector<std::string>& args, const std::string& server, int code,
                          const std::string& message);

// Marks the test `suite`.`name` as one that does not apply to a build under AddressSanitizer, and
// says why. DaemonTest::SetUp skips it there before its daemon starts (a start and stop takes 1.4 s
// in that build). Written beside the test, at namespace scope.
#define KCACHE_NOT_UNDER_ASAN(suite, name, why) \
  [[maybe_unused]] const bool kcache_not_under_asan_##suite##_##name = ::kcache::test::not_under_asan(#suite "." #name, why)
bool not_under_asan(const std::string& test, const std::string& why);

// The daemon the listed tests share, as SharedDaemon.Start wrote it down in the file that
// KCACHE_SHARED_DAEMON names.
struct SharedDaemon {
  int port = 0;
  pid_t pid = -1;     // kcached
  pid_t keeper = -1;  // its parent, which stops it if ctest goes and writes down its exit status
  std::filesystem::path folder;  // its database, log (kcached.log) and exit status (exit-status)
};
// The file KCACHE_SHARED_DAEMON names, or nullptr when this test starts its own daemon.
const char* shared_daemon_file();
// Reads what SharedDaemon.Start wrote; throws when it is missing or malformed.
SharedDaemon read_shared_daemon(const std::filesystem::path& file);

class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Extra kcached flags for this fixture's daemon.
  virtual std::vector<std::string> daemon_args() const { return {}; }
  // The daemon binary; empty: kcached (faulty_daemon_path() for fault injection).
  virtual std::string daemon_executable() const { return {}; }

  // Stops the daemon (expecting a clean exit) and starts a new one on the same database. A test
  // on the shared daemon cannot (DaemonProcess::attach).
  void restart();

  // `text_ir` with a comment naming this test: a module, and so a key, that no other test
  // compiles. A test that asserts what its key holds (a miss first, the archs stored) says so
  // to keep its assertions on a daemon other tests share.
  static std::string own_module(const std::string& text_ir);

  std::filesystem::path db() const { return m_dir.path() / "db"; }

  // Compiles `request`, asking again while the answer is DEADLINE_EXCEEDED, for up to 60 s: under
  // a 1 s --job-timeout on a busy machine, a small job (or its wait for the worker that replaces
  // one killed at the limit) can run past it. Any other answer is returned as it is.
  Expected<v1::CompileResponse> compile_patiently(const v1::CompileRequest& request);

  TempDir m_dir;
  std::unique_ptr<DaemonProcess> m_daemon;
  std::unique_ptr<Client> m_client;
};

}  // namespace kcache::test
