// Compile workers: kcached runs every compile in a child process, a copy of itself started as
// `kcached --worker`, so a module that crashes or hangs LLVM or ptxas, or eats memory, costs one
// job and one worker, never the daemon, the store or the hit path.
//
// The daemon side is WorkerSet: up to one worker per compile thread, the first started with the
// daemon and the others as jobs first need them, each spoken to over its own socket pair
// (channel.hpp, protocol in proto/kcache/worker/worker.proto). A job gets the worker's reply,
// or: DEADLINE_EXCEEDED when it overruns its deadline (the worker is killed), INTERNAL naming
// the signal or exit status when the worker dies. A dead worker is replaced at once: the
// replacement starts while the failed job's error goes back.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "compile/compiler.hpp"
#include "compile/tool_step.hpp"
#include "kcache/key.hpp"

namespace kcache::worker_protocol {
class Job;
class Result;
}  // namespace kcache::worker_protocol

namespace kcache::server::worker {

// What a worker needs to rebuild the daemon's toolchain and run under its limits.
struct WorkerConfig {
  std::filesystem::path cuda_root;
  std::filesystem::path rocm_device_libs;  // empty: the usual places
  std::string cubin_assembler = "auto";
  std::string log_level = "info";
  std::uint64_t memory_limit = 0;  // address space, bytes; 0: none
  std::vector<ToolRun> tool_runs;  // the daemon's detection's program runs (ToolRuns), for reuse
  std::string jail = "none";       // "bwrap": the daemon's probe found the jail works (compile/jail.hpp)
};

// `kcached --worker ...`: serves jobs on fd 3 until the daemon closes it. Returns the exit code.
int worker_main(int argc, char** argv);

class WorkerSet {
 public:
  // `executable`: the kcached binary (started with --worker).
  WorkerSet(std::filesystem::path executable, WorkerConfig config);
  ~WorkerSet();  // closes every channel (idle workers exit) and reaps them
  WorkerSet(const WorkerSet&) = delete;
  WorkerSet& operator=(const WorkerSet&) = delete;

  // What a worker detected: its toolchain fingerprint (hex) and its cubin assembler.
  struct Report {
    std::string fingerprint_hex;
    std::string nvjitlink_version;  // "" where it assembles with ptxas
    std::string nvrtc_version;      // "" where it has no NVRTC
  };

  // Makes room for `count` workers (one per compile thread) and starts the first, waiting until it
  // has detected its toolchain. The others start as jobs first need them, so a daemon that is
  // only asked for hits, or compiles one thing at a time, runs one worker, not one per core.
  // Fails when the first worker cannot start. Returns what it detected; every worker started
  // later must report the same.
  Expected<Report> start(std::size_t count);

  // Runs `job` on an idle worker (starting one if none is idle). Thread-safe.
  Expected<CompileOutput> compile(const CompileJob& job, const Key& key);
  // Runs a checked build step on an idle worker, pinned to `cpus` (none: any), as compile does.
  Expected<StepRun> run_step(const StepWork& work, const std::vector<unsigned>& cpus, const Key& key);

  std::uint64_t restarts() const { return m_restarts; }  // workers started to replace dead ones
  std::uint64_t crashes() const { return m_crashes; }    // workers that died or were killed

 private:
  struct Process {
    pid_t pid = -1;
    int fd = -1;
    bool ready = false;  // its hello has arrived
  };
  // Sends `message` to an idle worker (starting one if none is idle) and returns its reply, under
  // `deadline`; a reply with an error code becomes that error.
  Expected<worker_protocol::Result> exchange(worker_protocol::Job& message,
                                             std::chrono::steady_clock::time_point deadline, const Key& key);
  // Spawns a worker, sends it the Setup, and returns it without waiting for its hello.
  Expected<Process> spawn();
  Expected<void> await_hello(Process& p);
  // Starts a worker in place of one that ended and leaves it idle (it says hello to its first job).
  void replace();
  // Kills (when `kill_first`) and reaps `p`; returns how it ended, in words.
  std::string reap(Process& p, bool kill_first);

  const std::filesystem::path m_executable;
  const WorkerConfig m_config;
  std::optional<Report> m_reference;  // the first worker's report; set once, by start()
  std::mutex m_mutex;  // guards m_idle and m_unstarted
  std::vector<Process> m_idle;
  std::size_t m_unstarted = 0;  // workers start() made room for that no job has needed yet
  std::atomic<std::uint64_t> m_restarts{0}, m_crashes{0};
};

}  // namespace kcache::server::worker
