// Build steps on the daemon (kcache/step.hpp): a worker runs cicc, clang or ptxas of this daemon's
// toolkit, or a host compiler of this machine, on a step's files, in a folder of its own (and the
// jail) that it removes afterwards.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compile/toolchain.hpp"
#include "kcache/expected.hpp"
#include "kcache/step.hpp"

namespace kcache::server {

// A step to run: checked (check_step), its inputs with their bytes.
struct StepWork {
  StepTool tool = StepTool::cicc;
  std::filesystem::path program;  // a host step's compiler driver, chosen by the daemon by its identity
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string_view>> inputs;  // (name, bytes)
  std::vector<std::string> outputs;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
};

struct StepRun {
  int exit_code = 0;
  std::vector<std::pair<std::string, std::string>> outputs;  // (name, bytes) in StepWork::outputs' order; exit 0 only
  std::string stdout_text, stderr_text;
};

// The most bytes one output of a step may have.
inline constexpr std::size_t k_max_step_output = 256ULL << 20;

// Runs a device step with this toolchain's tool: FAILED_PRECONDITION where the toolkit lacks it;
// DEADLINE_EXCEEDED when it overruns (killed); INTERNAL when it exits 0 without writing a
// declared output. A tool that fails is not an error: its exit code and what it printed come back.
Expected<StepRun> run_step(const Toolchain& toolchain, const StepWork& work);

// The identity of this toolchain's `tool` (kcache/step.hpp, step_tool_identity); FAILED_PRECONDITION
// where the toolkit lacks it. Reads and hashes the tool's files: call once and keep it.
Expected<Digest> own_step_tool_identity(const Toolchain& toolchain, StepTool tool);

}  // namespace kcache::server
