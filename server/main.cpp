// kcached: parse flags, start the daemon, serve until SIGTERM or SIGINT, shut down cleanly; or,
// as `kcached --worker`, serve compile jobs for a daemon.
#include <absl/synchronization/mutex.h>
#include <malloc.h>
#include <signal.h>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#if __has_include(<sanitizer/lsan_interface.h>)
#include <sanitizer/lsan_interface.h>
#endif

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string_view>

#include "compile/object_check.hpp"
#include "config.hpp"
#include "daemon.hpp"
#include "kcache/version.hpp"
#include "sanitizers.hpp"
#include "store/store.hpp"
#include "worker/worker.hpp"

namespace {

// Writes the port atomically (temp file + rename), so a reader never sees a partial number.
bool write_port_file(const std::filesystem::path& path, int port) {
  std::filesystem::path tmp = path;
  tmp += ".tmp";
  {
    std::ofstream f(tmp);
    f << port << '\n';
    if (!f) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  return !ec;
}

// kcached --verify: checks the database and prints one line per problem. Exit 0 when all is well,
// 1 when something was wrong (removed with --repair), 2 when the check could not run.
int verify_store(const kcache::server::Config& config) {
  using namespace kcache::server;
  auto store = Store::open(StoreOptions{config.db, check_host_object});
  if (!store) {
    spdlog::critical("{}{}", store.error().message,
                     store.error().message.find("lock") != std::string::npos
                         ? " (is kcached running on it? --verify needs the daemon stopped)"
                         : "");
    return 2;
  }
  auto report = (*store)->verify(config.repair);
  if (!report) {
    spdlog::critical("{}", report.error().message);
    return 2;
  }
  for (const VerifyProblem& p : report->problems) {
    std::printf("bad %s entry %s: %s\n", std::string(kcache::side_name(p.side)).c_str(),
                p.key_hex.empty() ? "?" : p.key_hex.c_str(), p.what.c_str());
  }
  if (report->counters_wrong) std::printf("usage counters disagree with the entries%s\n", config.repair ? ": rewritten" : "");
  std::printf("%llu good entries, %llu images, %llu bytes; %zu bad%s; %llu without an access time%s\n",
              static_cast<unsigned long long>(report->entries), static_cast<unsigned long long>(report->images),
              static_cast<unsigned long long>(report->bytes), report->problems.size(),
              config.repair ? (", " + std::to_string(report->removed) + " removed").c_str() : "",
              static_cast<unsigned long long>(report->access_times_added), config.repair ? " (added)" : "");
  return report->problems.empty() && !report->counters_wrong ? 0 : 1;
}

// LeakSanitizer's check, which sanitizer builds run at exit (std::_Exit skips it); a leak found
// ends the process with LeakSanitizer's exit code, as at exit.
void check_leaks_before_exit() {
#ifdef KCACHE_ASAN
  __lsan_do_leak_check();
#endif
}

}  // namespace

int main(int argc, char** argv) {
  // The daemon starts its compile workers as copies of itself (server/worker/worker.hpp).
  if (argc > 1 && std::string_view(argv[1]) == "--worker") return kcache::server::worker::worker_main(argc, argv);
  // glibc maps every allocation over 128 KiB afresh and faults it in; gRPC fetches of 1-16 MiB
  // images did so for each buffer on every request (38% of the daemon's CPU at 1 MiB,
  // bench/README.md). Keep buffers up to 4 MiB (gRPC's chunks among them) in the heap, and up to
  // 32 MiB of freed heap for reuse. Larger ones (an image read from RocksDB, kept in the hot
  // cache) are mapped, and unmapped when freed: with 64 MiB and 256 MiB here, each thread's arena
  // kept its freed 16 MiB reads, and the hit-path load peaked at 420-490 MiB instead of 265-275.
  mallopt(M_MMAP_THRESHOLD, 4 << 20);
  mallopt(M_TRIM_THRESHOLD, 32 << 20);
  // Debian's abseil is built without NDEBUG, so every absl::Mutex inside gRPC would run deadlock
  // detection (1-3% of a fetch's CPU in the profiles).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  auto parsed = kcache::server::parse_config(argc, argv, kcache::version_text("kcached"));
  if (!parsed.config) return parsed.exit_code;
  const kcache::server::Config& config = *parsed.config;

  auto logger = spdlog::stderr_color_mt("kcached");
  spdlog::set_default_logger(logger);
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  if (config.verify) return verify_store(config);

  // A peer that went away (a client, Redis, a worker) must cost that call, never the daemon: every
  // write to a closed socket or pipe is an EPIPE error, not a signal.
  ::signal(SIGPIPE, SIG_IGN);
  // Signals are taken synchronously by this thread only; every thread started later inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto daemon = kcache::server::Daemon::start(config);
  if (!daemon) {
    spdlog::critical("{}", daemon.error().message);
    return 1;
  }
  if (!config.port_file.empty() && !write_port_file(config.port_file, (*daemon)->port())) {
    spdlog::critical("cannot write the port file {}", config.port_file.string());
    return 1;
  }
  std::printf("kcached listening on port %d\n", (*daemon)->port());
  std::fflush(stdout);

  int signal = 0;
  sigwait(&stop_signals, &signal);
  spdlog::info("{} received: finishing in-flight jobs", signal == SIGTERM ? "SIGTERM" : "SIGINT");
  (*daemon)->shutdown();
  daemon->reset();  // the connections, the store and the workers closed (gRPC's teardown may go on: ~Daemon)
  spdlog::info("stopped cleanly");
  spdlog::shutdown();
  // Leave without static destructors: gRPC's library teardown may still be waiting on a poll
  // (~Daemon), and everything kcached keeps is closed. Leak checking, which sanitizer builds
  // run at exit, runs here.
  check_leaks_before_exit();
  std::_Exit(0);
}
