// Running a program as a child process with posix_spawn, never fork: gRPC's threads make fork
// without exec unsafe. The daemon runs its toolchain's programs (ptxas, nvlink, cicc) this way,
// the compiler launcher the steps of a compiler's plan.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kcache/expected.hpp"

namespace kcache {

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string output;        // stdout, with stderr interleaved unless Output::separate
  std::string error_output;  // stderr, with Output::separate
};

struct ProcessOptions {
  // merged: stdout and stderr into ProcessResult::output; separate: each into its own; inherit:
  // the caller's stdout and stderr, nothing captured.
  enum class Output { merged, separate, inherit };
  Output output = Output::merged;
  std::filesystem::path cwd;  // empty: the caller's
  // The child's whole environment, "NAME=VALUE" each; null: the caller's.
  const std::vector<std::string>* env = nullptr;
  bool search_path = false;  // argv[0] may be a bare name, looked up in PATH (of `env` if given)
  // The child is killed (and the run fails with DEADLINE_EXCEEDED) when it is still running then.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  std::size_t max_output = 64ULL << 20;  // captured bytes kept, each stream; the rest is read and dropped
  // Past max_output the child is killed and the run fails with RESOURCE_EXHAUSTED, rather than
  // read to its end (a tool made to print without end).
  bool kill_past_max_output = false;
  // Descriptors the child inherits: (the caller's fd, its number in the child), close-on-exec or not.
  std::vector<std::pair<int, int>> inherit_fds;
};

// Runs argv[0] with argv; fails when the program cannot be started, or with DEADLINE_EXCEEDED
// (after killing it) when it is still running at the deadline. stdin is /dev/null.
Expected<ProcessResult> run_process(const std::vector<std::string>& argv, const ProcessOptions& options);
// run_process with merged output and `deadline`.
Expected<ProcessResult> run_process(const std::vector<std::string>& argv,
                                    std::chrono::steady_clock::time_point deadline =
                                        std::chrono::steady_clock::time_point::max());

// Removes the folders `dir`/<prefix><pid>-* that this user's processes made for themselves and
// left behind when they were killed (no destructor ran): those whose pid no longer runs here and
// in which nothing changed for `min_age`. A live process's folder is never touched: its pid still
// answers kill(pid, 0). `min_age` also spares a live process of the same pid in another pid
// namespace that shares `dir` (a container sharing /tmp), where that matters.
void remove_folders_of_dead_processes(const std::filesystem::path& dir, std::string_view prefix,
                                      std::chrono::seconds min_age = std::chrono::seconds(0));

}  // namespace kcache
