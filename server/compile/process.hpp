// Running a toolchain program (ptxas, ...) as a child process with posix_spawn, never fork:
// gRPC's threads make fork without exec unsafe.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "kcache/expected.hpp"

namespace kcache::server {

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string output;  // stdout and stderr, interleaved
};

// Runs argv[0] (a path) with argv; fails when the program cannot be started, or with
// DEADLINE_EXCEEDED (after killing it) when it is still running at `deadline`.
Expected<ProcessResult> run_process(const std::vector<std::string>& argv,
                                    std::chrono::steady_clock::time_point deadline =
                                        std::chrono::steady_clock::time_point::max());

}  // namespace kcache::server
