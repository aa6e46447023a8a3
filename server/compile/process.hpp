// Running a toolchain program (ptxas, ...) as a child process with posix_spawn, never fork:
// gRPC's threads make fork without exec unsafe.
#pragma once

#include <string>
#include <vector>

#include "kcache/expected.hpp"

namespace kcache::server {

struct ProcessResult {
  int exit_code = -1;  // -1 when killed by a signal
  int signal = 0;
  std::string output;  // stdout and stderr, interleaved
};

// Runs argv[0] (a path) with argv; fails only when the program cannot be started.
Expected<ProcessResult> run_process(const std::vector<std::string>& argv);

}  // namespace kcache::server
