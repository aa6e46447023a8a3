#include "test_support.hpp"

#include <algorithm>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <llvm/AsmParser/Parser.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

extern char** environ;

namespace kcache::test {
namespace {

constexpr auto k_start_timeout = std::chrono::seconds(60);

std::vector<char*> c_args(const std::vector<std::string>& args) {
  std::vector<char*> out;
  for (const std::string& a : args) out.push_back(const_cast<char*>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

std::string tail(const std::string& text, std::size_t n = 4000) {
  return text.size() <= n ? text : text.substr(text.size() - n);
}

// The kcache command line for `args`, with KCACHE_SERVER as run_cli says.
std::vector<std::string> cli_argv(const std::vector<std::string>& args, const std::string& server) {
  // What the CLI remembers about daemons stays in this test process's own folder.
  static TempDir state;
  ::setenv("KCACHE_STATE_DIR", state.path().c_str(), 0);
  std::vector<std::string> argv = {KCACHE_CLI_PATH};
  if (!server.empty()) argv.insert(argv.end(), {"--server", server});
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

// Starts `argv_in` (argv[0] an absolute path) with its stdout and stderr written to `out` and `err`.
pid_t spawn_to_files(const std::vector<std::string>& argv_in, const std::filesystem::path& out,
                     const std::filesystem::path& err) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  auto argv = c_args(argv_in);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot run " + argv_in[0] + ": " + std::strerror(rc));
  return pid;
}

}  // namespace

int wait_status(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

int connect_loopback(int port, const char* from) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (from != nullptr) {
    sockaddr_in self{};
    self.sin_family = AF_INET;
    inet_pton(AF_INET, from, &self.sin_addr);
    ::bind(fd, reinterpret_cast<sockaddr*>(&self), sizeof self);
  }
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<std::uint16_t>(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0) return fd;
  ::close(fd);
  return -1;
}

std::uint64_t peak_rss(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmHWM:")) return std::stoull(line.substr(6)) * 1024;
  }
  return 0;
}

pid_t spawn_child(const std::vector<std::string>& args, const std::filesystem::path& log, int stdout_fd) {
  auto argv = c_args(args);
  // fork and exec rather than posix_spawn, for PR_SET_PDEATHSIG: a test process that crashes
  // (or is killed by ctest's timeout) never runs its destructors, and its children would run on.
  // Between fork and exec only async-signal-safe calls: gRPC threads may run in this process.
  const pid_t parent = getpid();
  const char* log_path = log.c_str();
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the parent is already gone
    int err = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (err < 0 || dup2(stdout_fd >= 0 ? stdout_fd : err, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0) {
      _exit(127);
    }
    execve(argv[0], argv.data(), environ);
    _exit(127);
  }
  if (pid < 0) throw std::runtime_error("cannot start " + args.front() + ": " + std::strerror(errno));
  return pid;
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "kcache-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  m_path = pattern;
}

TempDir::~TempDir() {
  if (m_keep) return;
  std::error_code ec;
  std::filesystem::remove_all(m_path, ec);
}

std::unique_ptr<DaemonProcess> DaemonProcess::start(const std::filesystem::path& db, const std::filesystem::path& log,
                                                    const std::vector<std::string>& extra_args,
                                                    const std::string& listen,
                                                    const std::string& executable) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  std::vector<std::string> args = {executable.empty() ? KCACHE_DAEMON_PATH : executable, "--listen", listen, "--db", db.string(),
                                   "--log-level", "debug"};
  // The HTTP image API is served by default (on a free port too, since the gRPC port is 0).
  args.insert(args.end(), extra_args.begin(), extra_args.end());
  auto d = std::unique_ptr<DaemonProcess>(new DaemonProcess());
  try {
    d->m_pid = spawn_child(args, log, out[1]);
  } catch (...) {
    close(out[0]);
    close(out[1]);
    throw;
  }
  close(out[1]);
  // Wait for "kcached listening on port N" on its stdout: a condition, not a sleep.
  std::string line;
  auto deadline = std::chrono::steady_clock::now() + k_start_timeout;
  while (line.find('\n') == std::string::npos) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{out[0], POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[256];
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n <= 0) break;
    line.append(buf, static_cast<std::size_t>(n));
  }
  close(out[0]);
  auto pos = line.find("port ");
  if (pos == std::string::npos) {
    d->kill9();
    throw std::runtime_error("kcached did not start; its log:\n" + tail(read_file(log)));
  }
  d->m_port = std::stoi(line.substr(pos + 5));
  return d;
}

std::unique_ptr<DaemonProcess> DaemonProcess::attach(int port, pid_t pid) {
  auto d = std::unique_ptr<DaemonProcess>(new DaemonProcess());
  d->m_port = port;
  d->m_pid = pid;
  d->m_attached = true;
  return d;
}

DaemonProcess::~DaemonProcess() {
  if (m_pid > 0 && !m_attached) kill9();
}

namespace {
void refuse_to_stop_a_shared_daemon(bool attached) {
  if (attached) {
    throw std::logic_error("this test stops or restarts its daemon, which other tests share: take it out of "
                           "tests/shared_daemon.cmake");
  }
}
}  // namespace

int DaemonProcess::stop() {
  refuse_to_stop_a_shared_daemon(m_attached);
  // Once stopped, stop again answers the same: kill(-1, ...) would signal every process we may.
  if (m_pid <= 0) return m_status;
  kill(m_pid, SIGTERM);
  m_status = wait_status(m_pid);
  m_pid = -1;
  return m_status;
}

void DaemonProcess::kill9() {
  refuse_to_stop_a_shared_daemon(m_attached);
  if (m_pid <= 0) return;
  kill(m_pid, SIGKILL);
  wait_status(m_pid);
  m_pid = -1;
}

CommandResult run_program(const std::vector<std::string>& argv_in) {
  TempDir dir;
  std::filesystem::path out = dir.path() / "out", err = dir.path() / "err";
  pid_t pid = spawn_to_files(argv_in, out, err);
  CommandResult r;
  r.exit_code = wait_status(pid);
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

CommandResult run_cli(const std::vector<std::string>& args, const std::string& server) {
  return run_program(cli_argv(args, server));
}

BoundedRun run_cli_bounded(const std::vector<std::string>& args, const std::string& server,
                           std::chrono::milliseconds time, std::uint64_t memory) {
  TempDir dir;
  std::filesystem::path out = dir.path() / "out", err = dir.path() / "err";
  auto start = std::chrono::steady_clock::now();
  pid_t pid = spawn_to_files(cli_argv(args, server), out, err);
  BoundedRun r;
  int status = 0;
  for (;;) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR)) break;
    r.peak_rss = std::max(r.peak_rss, peak_rss(pid));
    if (!r.killed && (std::chrono::steady_clock::now() - start > time || r.peak_rss > memory)) {
      ::kill(pid, SIGKILL);
      r.killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  r.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_file(const std::filesystem::path& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
}

std::string read_test_data(const std::string& name) {
  std::string data = read_file(std::filesystem::path(KCACHE_TEST_DATA_DIR) / name);
  if (data.empty()) throw std::runtime_error("missing test data " + name);
  return data;
}

std::string to_bitcode(const std::string& text_ir) {
  llvm::LLVMContext ctx;
  llvm::SMDiagnostic diag;
  auto module = llvm::parseAssemblyString(text_ir, diag, ctx);
  if (!module) throw std::runtime_error("test IR does not parse: " + diag.getMessage().str());
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::WriteBitcodeToFile(*module, os);
  os.flush();
  return out;
}

std::string host_object_with_llc(const std::string& text_ir) {
  TempDir dir;
  write_file(dir.path() / "m.ll", text_ir);
  auto r = run_program({KCACHE_LLC_PATH, "-filetype=obj", "-relocation-model=pic", "-o", (dir.path() / "m.o").string(),
                        (dir.path() / "m.ll").string()});
  if (r.exit_code != 0) throw std::runtime_error("llc failed: " + r.err);
  return read_file(dir.path() / "m.o");
}

std::filesystem::path ptxas_path() {
  std::filesystem::path p = "/usr/local/cuda/bin/ptxas";
  return std::filesystem::exists(p) ? p : std::filesystem::path();
}

bool eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  using namespace std::chrono_literals;
  auto until = std::chrono::steady_clock::now() + timeout;
  for (auto pause = 2ms; std::chrono::steady_clock::now() < until; pause = std::min(pause * 2, 100ms)) {
    if (condition()) return true;
    std::this_thread::sleep_for(pause);
  }
  return condition();
}

}  // namespace kcache::test
