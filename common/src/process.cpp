#include "kcache/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "kcache/search_path.hpp"

extern char** environ;

namespace kcache {
namespace {

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

}  // namespace

Expected<ProcessResult> run_process(const std::vector<std::string>& argv, const ProcessOptions& options) {
  using Output = ProcessOptions::Output;
  int out_fds[2] = {-1, -1}, err_fds[2] = {-1, -1};
  bool capture = options.output != Output::inherit;
  if (capture && pipe2(out_fds, O_CLOEXEC) != 0) {
    return make_error(ErrorCode::k_internal, std::string("pipe: ") + std::strerror(errno));
  }
  if (options.output == Output::separate && pipe2(err_fds, O_CLOEXEC) != 0) {
    close_fd(out_fds[0]), close_fd(out_fds[1]);
    return make_error(ErrorCode::k_internal, std::string("pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (capture) {
    posix_spawn_file_actions_adddup2(&actions, out_fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, options.output == Output::separate ? err_fds[1] : out_fds[1],
                                     STDERR_FILENO);
  }
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // glibc 2.29 and later clear close-on-exec where both numbers are the same.
  for (auto [from, to] : options.inherit_fds) posix_spawn_file_actions_adddup2(&actions, from, to);
  if (!options.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, options.cwd.c_str());

  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> env;
  if (options.env != nullptr) {
    for (const std::string& e : *options.env) env.push_back(const_cast<char*>(e.c_str()));
    env.push_back(nullptr);
  }
  char** envp = options.env != nullptr ? env.data() : environ;
  pid_t pid = 0;
  int rc = 0;
  if (options.search_path && options.env != nullptr && argv[0].find('/') == std::string::npos) {
    // posix_spawnp searches the caller's PATH; the child's is the one that names its programs.
    std::string path(k_default_path);
    for (const std::string& e : *options.env) {
      if (e.starts_with("PATH=")) path = e.substr(5);
    }
    std::string found = search_path(argv[0], path);
    rc = found.empty() ? ENOENT : posix_spawn(&pid, found.c_str(), &actions, nullptr, args.data(), envp);
  } else if (options.search_path) {
    rc = posix_spawnp(&pid, argv[0].c_str(), &actions, nullptr, args.data(), envp);
  } else {
    rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), envp);
  }
  posix_spawn_file_actions_destroy(&actions);
  close_fd(out_fds[1]);
  close_fd(err_fds[1]);
  if (rc != 0) {
    close_fd(out_fds[0]);
    close_fd(err_fds[0]);
    return make_error(ErrorCode::k_failed_precondition, "cannot run " + argv[0] + ": " + std::strerror(rc));
  }
  ProcessResult result;
  char buf[16384];
  bool overran = false, overflowed = false;
  std::string* sinks[2] = {&result.output, &result.error_output};
  int fds[2] = {out_fds[0], err_fds[0]};
  auto wait_left = [&]() -> int {
    if (options.deadline == std::chrono::steady_clock::time_point::max()) return -1;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(options.deadline -
                                                                      std::chrono::steady_clock::now());
    return static_cast<int>(std::max<long long>(0, left.count()));
  };
  while (fds[0] >= 0 || fds[1] >= 0) {
    pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    int ready = poll(p, 2, wait_left());
    if (ready == 0) {
      overran = true;
      kill(pid, SIGKILL);
      break;
    }
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || p[i].revents == 0) continue;
      ssize_t n = read(fds[i], buf, sizeof buf);
      if (n > 0) {
        std::size_t room = options.max_output - std::min(options.max_output, sinks[i]->size());
        sinks[i]->append(buf, std::min(room, static_cast<std::size_t>(n)));
        if (static_cast<std::size_t>(n) > room && options.kill_past_max_output) {
          overflowed = true;
          kill(pid, SIGKILL);
          close_fd(fds[0]);
          close_fd(fds[1]);
        }
      } else if (n == 0 || errno != EINTR) {
        close_fd(fds[i]);
      }
    }
  }
  if (!capture && options.deadline != std::chrono::steady_clock::time_point::max()) {
    // Nothing to read: wait for the child itself, up to the deadline.
    for (;;) {
      int status = 0;
      pid_t done = waitpid(pid, &status, WNOHANG);
      if (done == pid) {
        if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
        return result;
      }
      if (wait_left() == 0) {
        overran = true;
        kill(pid, SIGKILL);
        break;
      }
      usleep(2000);
    }
  }
  close_fd(fds[0]);
  close_fd(fds[1]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  if (overflowed) {
    return make_error(ErrorCode::k_resource_exhausted, argv[0] + " printed more than " +
                                                           std::to_string(options.max_output) + " bytes and was killed");
  }
  if (overran) {
    return make_error(ErrorCode::k_deadline_exceeded,
                      argv[0] + " was still running at the job's time limit (--job-timeout) and was killed");
  }
  return result;
}

Expected<ProcessResult> run_process(const std::vector<std::string>& argv,
                                    std::chrono::steady_clock::time_point deadline) {
  ProcessOptions options;
  options.deadline = deadline;
  return run_process(argv, options);
}

void remove_folders_of_dead_processes(const std::filesystem::path& dir, std::string_view prefix,
                                      std::chrono::seconds min_age) {
  std::error_code ec;
  const auto now = std::filesystem::file_time_type::clock::now();
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    // <prefix><pid>-XXXXXX: the pid of the process that made it.
    std::string_view rest = std::string_view(name).substr(prefix.size());
    auto dash = rest.find('-');
    if (dash == std::string_view::npos || dash == 0 || dash > 9) continue;
    pid_t pid = 0;
    for (char c : rest.substr(0, dash)) {
      if (c < '0' || c > '9') {
        pid = 0;
        break;
      }
      pid = pid * 10 + (c - '0');
    }
    struct stat st {};
    if (pid <= 0 || ::lstat(it->path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    if (min_age.count() > 0) {
      std::error_code time_ec;
      auto changed = std::filesystem::last_write_time(it->path(), time_ec);
      if (time_ec || now - changed < min_age) continue;
    }
    std::error_code remove_ec;
    std::filesystem::remove_all(it->path(), remove_ec);
  }
}

}  // namespace kcache
