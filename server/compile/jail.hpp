// The jail every tool kcached runs on a peer's bytes runs in: build steps (cicc, clang, ptxas)
// and the compile workers' tool processes (ptxas, nvlink, ld.lld). Isolation is the defense;
// the argument and input checks at the edge (kcache/step.hpp) are the second line.
//
// A jailed tool runs under bubblewrap (Debian's `bubblewrap`), with, around it:
//   - its own mount namespace holding read-only only the system's programs and libraries
//     (/usr/bin, /usr/lib, /usr/lib64, /usr/libexec, /usr/include) and the toolkit's folders, and
//     its one folder read-write; no /etc, /home, /var, /root, /run or the daemon's /tmp: not the
//     tokens file, not the store, not the daemon's Unix sockets;
//   - its own user, PID, network, IPC, UTS and cgroup namespaces (no network at all; /proc shows
//     only the jail's processes), no capabilities, no new privileges, no further user namespaces,
//     a new session (no TIOCSTI into the daemon's terminal);
//   - a seccomp filter (libseccomp) refusing what a compiler never does: sockets other than
//     AF_UNIX, mount and namespace calls, ptrace and other processes' memory, kernel modules,
//     keyrings, BPF, perf, io_uring, userfaultfd, and every 32-bit system call;
//   - limits (prlimit): processes (when the daemon runs as root, the tool runs as a user of its
//     own, jail_uid(): its worker's, whose RLIMIT_NPROC counts that one jail's processes alone, so a
//     fork bomb in one step takes no process from another), CPU seconds (the job's deadline), file size (a step's
//     256 MiB output limit), open files, address space (the worker's memory limit), no core
//     files; and the process's output, which is cut and the tool killed past its limit.
// Why bubblewrap: it is packaged, small, setuid-free where user namespaces are allowed, and
// Flatpak's sandbox, so its handling of the corner cases is widely exercised. Its cost is measured
// in bench/ (kcache_bench_jail).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/expected.hpp"
#include "kcache/process.hpp"

namespace kcache::server {

struct JailPolicy {
  // Folders the tools read besides the system's (the CUDA toolkit, LLVM outside /usr): bound
  // read-only at their real paths, with the path given kept as a symbolic link to it.
  std::vector<std::filesystem::path> read_only;
  unsigned max_processes = 256;                  // processes and threads (RLIMIT_NPROC), as jail_uid()
  std::uint64_t max_file_bytes = 256ULL << 20;   // RLIMIT_FSIZE: no file a tool writes is larger
  std::uint64_t max_memory_bytes = 0;            // RLIMIT_AS; 0: the worker's own limit applies
  unsigned max_open_files = 256;                 // RLIMIT_NOFILE
};

class Jail {
 public:
  enum class Mode : std::uint8_t { bwrap = 1, none = 2 };

  // Whether a jail can be set up here: bwrap, prlimit (and setpriv, as root) found, and a jailed
  // /usr/bin/true runs. Mode::none with the reason when not. Takes about as long as one jailed run.
  static Jail probe(JailPolicy policy);
  // A jail known to work (a worker told so by its daemon's probe): no probe.
  static Jail bwrap(JailPolicy policy);
  // No jail: tools run as plain child processes. `reason` says why, for the log and the status page.
  static Jail none(std::string reason);

  Mode mode() const { return m_mode; }
  std::string_view mode_name() const { return m_mode == Mode::bwrap ? "bwrap" : "none"; }
  const std::string& reason() const { return m_reason; }  // why there is none; empty with bwrap

  // Runs argv (argv[0] an absolute path) with `folder` as the one folder it may write, its working
  // folder unless options.cwd says another inside it. The jail's own failures (it could not be set
  // up) are INTERNAL; a tool that exits non-zero or is killed is not an error (ProcessResult says
  // how), except past the deadline (DEADLINE_EXCEEDED) or the output limit (RESOURCE_EXHAUSTED).
  Expected<ProcessResult> run(const std::vector<std::string>& argv, const std::filesystem::path& folder,
                              ProcessOptions options) const;

  // The full command line run() would start, for tests and the log: the jail's programs, then argv.
  std::vector<std::string> command(const std::vector<std::string>& argv, const std::filesystem::path& folder,
                                   const ProcessOptions& options) const;

 private:
  Jail() = default;

  Mode m_mode = Mode::none;
  std::string m_reason;
  JailPolicy m_policy;
  std::string m_seccomp;  // the filter as BPF, given to bwrap on a pipe for each run
  bool m_as_root = false; // the daemon is root: tools run as m_uid
  unsigned m_uid = 0;     // jail_uid() of the process that made the jail
};

// The uids (and gids) jailed tools run as when the daemon is root: one per process that runs
// them (a worker runs one step at a time), k_jail_uid_base + its pid, no account of any kind.
// Each is a user of its own: its process limit counts its own jail's processes only.
inline constexpr unsigned k_jail_uid_base = 1000000000;
unsigned jail_uid();

}  // namespace kcache::server
