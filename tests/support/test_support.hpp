// Helpers shared by the test binaries: temp folders kept on failure, a real kcached process on
// a loopback port, running the kcache CLI, and the test kernels.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "slow_module.hpp"  // slow_device_module
#include "test_paths.hpp"   // KCACHE_DAEMON_PATH and the other paths of this build

namespace kcache::test {

// Whether the tests run under AddressSanitizer, where timing and memory bounds mean nothing and
// third-party code (nvJitLink) trips its checks.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool k_asan_build = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool k_asan_build = true;
#else
inline constexpr bool k_asan_build = false;
#endif
#else
inline constexpr bool k_asan_build = false;
#endif

// A fresh folder under $TMPDIR; removed at the end unless keep() was called.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return m_path; }
  void keep() { m_keep = true; }

 private:
  std::filesystem::path m_path;
  bool m_keep = false;
};

// A kcached child process listening on 127.0.0.1 on a port of its choosing.
class DaemonProcess {
 public:
  // Starts kcached (or `executable`, e.g. faulty_daemon_path()) with --db `db` (plus
  // `extra_args`), logging to `log`; returns once it has printed its port, or throws with the
  // log's tail.
  static std::unique_ptr<DaemonProcess> start(const std::filesystem::path& db, const std::filesystem::path& log,
                                              const std::vector<std::string>& extra_args = {},
                                              const std::string& listen = "127.0.0.1:0",
                                              const std::string& executable = "");
  // A kcached this process did not start: the daemon several tests share
  // (tests/integration/daemon_fixture.cpp). Its address and pid are there to read; stop() and
  // kill9() throw, since other tests are using it.
  static std::unique_ptr<DaemonProcess> attach(int port, pid_t pid);
  ~DaemonProcess();

  int port() const { return m_port; }
  std::string address() const { return "127.0.0.1:" + std::to_string(m_port); }
  pid_t pid() const { return m_pid; }

  // Sends SIGTERM and waits: the exit status (0 for a clean shutdown), or 128+signal.
  int stop();
  // SIGKILL, no chance to flush.
  void kill9();

 private:
  pid_t m_pid = -1;
  int m_status = 0;  // the exit status stop() saw
  int m_port = 0;
  bool m_attached = false;  // attach()'s: not this process's to stop
};

// Starts `argv` (argv[0] an absolute path) as a child killed when this process dies
// (PR_SET_PDEATHSIG), its stderr appended to `log`, its stdout to `stdout_fd` (-1: the log too).
// Throws when it cannot fork.
pid_t spawn_child(const std::vector<std::string>& argv, const std::filesystem::path& log, int stdout_fd = -1);
// Waits for a child: its exit status, or 128+signal.
int wait_status(pid_t pid);
// A TCP connection to 127.0.0.1:`port`, from the loopback address `from` when given (another
// 127.x address stands for another host), or -1.
int connect_loopback(int port, const char* from = nullptr);

// A process's peak resident memory (VmHWM), in bytes; 0 when it cannot be read.
std::uint64_t peak_rss(pid_t pid);

struct CommandResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// kcached-faults: kcached with the test fault hook (tests/support/fault_hook.cpp).
inline std::string faulty_daemon_path() { return KCACHE_FAULTY_DAEMON_PATH; }

// Runs the kcache CLI with `args`, with KCACHE_SERVER set to `server` (unless empty).
CommandResult run_cli(const std::vector<std::string>& args, const std::string& server);

// A CLI run with what it cost.
struct BoundedRun : CommandResult {
  std::chrono::milliseconds elapsed{0};
  // Bytes: the most resident memory seen (VmHWM, read every millisecond, across its exec of
  // kcache-grpc). Not wait4's ru_maxrss: that counts the memory of this process it was spawned in.
  std::uint64_t peak_rss = 0;
  bool killed = false;         // it ran past `time` or `memory` and was killed
};
// Runs the CLI as run_cli does, killing it (SIGKILL) once it has run `time` or holds `memory`
// resident, so a CLI that blocks or reads without end fails its test instead of stalling it.
BoundedRun run_cli_bounded(const std::vector<std::string>& args, const std::string& server,
                           std::chrono::milliseconds time, std::uint64_t memory);

// Runs any program (absolute path) with args.
CommandResult run_program(const std::vector<std::string>& argv);

// Waits for `condition`, polling (2 ms, doubling to 100 ms); false when `timeout` passes first.
bool eventually(const std::function<bool()>& condition,
                std::chrono::milliseconds timeout = std::chrono::seconds(20));

// Files under tests/data.
std::string read_test_data(const std::string& name);
std::string read_file(const std::filesystem::path& path);
void write_file(const std::filesystem::path& path, const std::string& data);


// LLVM bitcode of a text IR module (through LLVM itself).
std::string to_bitcode(const std::string& text_ir);

// A relocatable x86-64 object compiled from text IR with LLVM's llc, bypassing kcache entirely
// (to test the store's own refusal).
std::string host_object_with_llc(const std::string& text_ir);

// The CUDA toolkit's ptxas, or empty when the toolkit is absent.
std::filesystem::path ptxas_path();

// Runs work(state, i) for every i below `count` on `threads` threads, each with its own state
// from make_state() (a client, say), each taking the next i as it finishes one.
template <typename MakeState, typename Work>
void parallel_for(std::size_t count, int threads, MakeState make_state, Work work) {
  std::atomic<std::size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      auto state = make_state();
      for (std::size_t i = next++; i < count; i = next++) work(state, i);
    });
  }
  for (std::thread& t : pool) t.join();
}

}  // namespace kcache::test
