#include "compile/jail.hpp"

#include <errno.h>
#include <fcntl.h>
#include <seccomp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sched.h>

namespace kcache::server {
namespace {

namespace fs = std::filesystem;

// Where the jail's programs are: Debian's bubblewrap and util-linux (Essential).
constexpr const char* k_bwrap = "/usr/bin/bwrap";
constexpr const char* k_prlimit = "/usr/bin/prlimit";
constexpr const char* k_setpriv = "/usr/bin/setpriv";
// The descriptor number the seccomp filter reaches bwrap on.
constexpr int k_seccomp_fd = 3;

// The system's programs and libraries, read-only in every jail: what a dynamically linked tool
// needs to start (the loader, libc, libstdc++, libLLVM), and the host compiler's headers.
constexpr const char* k_system_folders[] = {"/usr/bin", "/usr/lib", "/usr/lib64", "/usr/libexec", "/usr/include"};

bool exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

// The seccomp filter, as BPF: everything a compiler does is allowed; what it never does fails
// with EPERM (sockets of other families with EAFNOSUPPORT), so a tool that tries gets an error it
// can report. Other architectures' system calls (32-bit x86 on x86-64) kill the process.
Expected<std::string> seccomp_program() {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (ctx == nullptr) return make_error(ErrorCode::k_internal, "seccomp_init failed");
  struct Release {
    scmp_filter_ctx ctx;
    ~Release() { seccomp_release(ctx); }
  } release{ctx};
  const char* denied[] = {
      // mounts and namespaces: the jail's shape is bwrap's to make, once
      "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "fsopen", "fsmount", "fsconfig", "move_mount",
      "open_tree", "fspick", "mount_setattr",
      // other processes and the kernel
      "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "perf_event_open", "bpf",
      "userfaultfd", "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module", "kexec_load",
      "kexec_file_load", "reboot", "swapon", "swapoff", "syslog", "acct", "settimeofday", "clock_settime",
      "clock_adjtime", "adjtimex", "sethostname", "setdomainname", "iopl", "ioperm", "quotactl", "lookup_dcookie",
      "vhangup", "open_by_handle_at", "name_to_handle_at", "fanotify_init", "io_uring_setup", "io_uring_enter",
      "io_uring_register", "personality", "uselib", "nfsservctl"};
  for (const char* name : denied) {
    int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not on this architecture
    if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0) != 0) {
      return make_error(ErrorCode::k_internal, std::string("seccomp: cannot refuse ") + name);
    }
  }
  // clone3 takes its flags in memory a filter cannot read: ENOSYS makes libc fall back to clone,
  // whose namespace flags are refused below.
  if (seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0) != 0 ||
      seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                       SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)) != 0 ||
      seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                       SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWNS, CLONE_NEWNS)) != 0 ||
      seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                       SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWNET, CLONE_NEWNET)) != 0 ||
      seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EAFNOSUPPORT), SCMP_SYS(socket), 1, SCMP_A0(SCMP_CMP_NE, AF_UNIX)) != 0) {
    return make_error(ErrorCode::k_internal, "seccomp: cannot add the clone and socket rules");
  }
  // Export through a pipe: the program is a few hundred bytes, well within a pipe's buffer.
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return make_error(ErrorCode::k_internal, std::string("pipe: ") + std::strerror(errno));
  int rc = seccomp_export_bpf(ctx, fds[1]);
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  if (rc != 0 || out.empty()) return make_error(ErrorCode::k_internal, "seccomp: cannot export the filter");
  return out;
}

// A pipe whose read end holds `bytes`, for one bwrap run; closed with the object.
class DataPipe {
 public:
  explicit DataPipe(std::string_view bytes) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    bool written = ::write(fds[1], bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
    ::close(fds[1]);
    if (!written) {
      ::close(fds[0]);
      return;
    }
    m_fd = fds[0];
  }
  ~DataPipe() {
    if (m_fd >= 0) ::close(m_fd);
  }
  DataPipe(const DataPipe&) = delete;
  DataPipe& operator=(const DataPipe&) = delete;
  int fd() const { return m_fd; }

 private:
  int m_fd = -1;
};

// Gives the tool's user (`uid`, when the daemon is root) the folder and what is in it.
Expected<void> hand_over(const fs::path& folder, unsigned uid) {
  auto give = [uid](const fs::path& p) { return ::lchown(p.c_str(), uid, uid) == 0; };
  if (!give(folder)) return make_error(ErrorCode::k_internal, "cannot give " + folder.string() + " to the jail's user: " + std::strerror(errno));
  std::error_code ec;
  for (fs::recursive_directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    if (!give(it->path())) {
      return make_error(ErrorCode::k_internal, "cannot give " + it->path().string() + " to the jail's user: " + std::strerror(errno));
    }
  }
  if (ec) return make_error(ErrorCode::k_internal, "cannot list " + folder.string() + ": " + ec.message());
  return {};
}

}  // namespace

unsigned jail_uid() { return k_jail_uid_base + static_cast<unsigned>(::getpid()); }

Jail Jail::none(std::string reason) {
  Jail jail;
  jail.m_mode = Mode::none;
  jail.m_reason = std::move(reason);
  return jail;
}

Jail Jail::bwrap(JailPolicy policy) {
  Jail jail;
  jail.m_mode = Mode::bwrap;
  jail.m_policy = std::move(policy);
  jail.m_as_root = ::geteuid() == 0;
  jail.m_uid = jail_uid();
  auto program = seccomp_program();
  if (!program) return none(program.error().message);
  jail.m_seccomp = *std::move(program);
  return jail;
}

Jail Jail::probe(JailPolicy policy) {
  for (const char* program : {k_bwrap, k_prlimit, k_setpriv}) {
    if (::access(program, X_OK) != 0) {
      return none(std::string(program) + " is missing (" +
                  (program == std::string_view(k_bwrap) ? "install bubblewrap" : "install util-linux") + ")");
    }
  }
  Jail jail = bwrap(std::move(policy));
  if (jail.mode() != Mode::bwrap) return jail;
  std::string pattern = (fs::temp_directory_path() / "kcache-jail-probe-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) return none("cannot make a folder to try the jail in");
  ProcessOptions options;
  options.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  auto ran = jail.run({"/usr/bin/true"}, pattern, options);
  std::error_code ec;
  fs::remove_all(pattern, ec);
  if (!ran) return none("bwrap could not start: " + ran.error().message);
  if (ran->exit_code != 0) {
    std::string said = ran->output;
    while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
    return none("bwrap could not set the jail up (exit " + std::to_string(ran->exit_code) + ": " + said.substr(0, 300) +
                "); user namespaces may be off (sysctl kernel.unprivileged_userns_clone, or a container or "
                "systemd unit that restricts namespaces)");
  }
  return jail;
}

std::vector<std::string> Jail::command(const std::vector<std::string>& argv, const fs::path& folder,
                                       const ProcessOptions& options) const {
  if (m_mode != Mode::bwrap) return argv;
  std::vector<std::string> out = {k_prlimit};
  if (options.deadline != std::chrono::steady_clock::time_point::max()) {
    auto left = std::chrono::ceil<std::chrono::seconds>(options.deadline - std::chrono::steady_clock::now()).count();
    out.push_back("--cpu=" + std::to_string(std::max<long long>(1, left) + 1));
  }
  out.push_back("--fsize=" + std::to_string(m_policy.max_file_bytes));
  out.push_back("--nofile=" + std::to_string(m_policy.max_open_files));
  out.push_back("--core=0");
  if (m_policy.max_memory_bytes > 0) out.push_back("--as=" + std::to_string(m_policy.max_memory_bytes));
  // Counted per user: only where the tool has a user of its own (as root) does it bound the jail.
  if (m_as_root) out.push_back("--nproc=" + std::to_string(m_policy.max_processes));
  out.push_back("--");
  if (m_as_root) {
    std::string id = std::to_string(m_uid);
    out.insert(out.end(), {k_setpriv, "--reuid=" + id, "--regid=" + id, "--clear-groups", "--"});
  }
  out.insert(out.end(), {k_bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                         "--new-session", "--cap-drop", "ALL"});
  for (const char* system : k_system_folders) {
    if (exists(system)) out.insert(out.end(), {"--ro-bind", system, system});
  }
  out.insert(out.end(), {"--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib"});
  if (exists("/usr/lib64")) out.insert(out.end(), {"--symlink", "usr/lib64", "/lib64"});
  for (const fs::path& root : m_policy.read_only) {
    std::error_code ec;
    fs::path real = fs::canonical(root, ec);
    if (ec) continue;
    bool system = std::any_of(std::begin(k_system_folders), std::end(k_system_folders),
                              [&](const char* s) { return real.string().starts_with(std::string(s) + "/"); });
    if (!system) out.insert(out.end(), {"--ro-bind", real.string(), real.string()});
    fs::path given = root.lexically_normal();
    if (given != real && !given.empty() && given.is_absolute()) out.insert(out.end(), {"--symlink", real.string(), given.string()});
  }
  out.insert(out.end(), {"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--bind", folder.string(),
                         folder.string(), "--chdir", options.cwd.empty() ? folder.string() : options.cwd.string(),
                         "--seccomp", std::to_string(k_seccomp_fd), "--"});
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

Expected<ProcessResult> Jail::run(const std::vector<std::string>& argv, const fs::path& folder,
                                  ProcessOptions options) const {
  if (m_mode != Mode::bwrap) {
    if (options.cwd.empty()) options.cwd = folder;
    return run_process(argv, options);
  }
  if (m_as_root) {
    if (auto given = hand_over(folder, m_uid); !given) return given.error();
  }
  DataPipe filter(m_seccomp);
  if (filter.fd() < 0) return make_error(ErrorCode::k_internal, std::string("cannot pass the seccomp filter: ") + std::strerror(errno));
  std::vector<std::string> jailed = command(argv, folder, options);
  options.cwd.clear();  // bwrap's --chdir, inside the jail
  options.search_path = false;
  options.inherit_fds.emplace_back(filter.fd(), k_seccomp_fd);
  return run_process(jailed, options);
}

}  // namespace kcache::server
