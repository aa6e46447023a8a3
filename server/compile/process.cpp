#include "compile/process.hpp"

#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fcntl.h>

extern char** environ;

namespace kcache::server {

Expected<ProcessResult> run_process(const std::vector<std::string>& argv,
                                    std::chrono::steady_clock::time_point deadline) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    return make_error(ErrorCode::k_internal, std::string("pipe: ") + std::strerror(errno));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);

  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  if (rc != 0) {
    close(pipe_fds[0]);
    return make_error(ErrorCode::k_failed_precondition, "cannot run " + argv[0] + ": " + std::strerror(rc));
  }
  ProcessResult result;
  char buf[16384];
  bool overran = false;
  for (;;) {
    int wait_ms = -1;
    if (deadline != std::chrono::steady_clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      wait_ms = static_cast<int>(std::max<long long>(0, left.count()));
    }
    pollfd p{pipe_fds[0], POLLIN, 0};
    int ready = poll(&p, 1, wait_ms);
    if (ready == 0) {
      overran = true;
      kill(pid, SIGKILL);
      break;
    }
    if (ready < 0 && errno == EINTR) continue;
    ssize_t n = read(pipe_fds[0], buf, sizeof buf);
    if (n > 0) result.output.append(buf, static_cast<std::size_t>(n));
    else if (n == 0 || errno != EINTR) break;
  }
  close(pipe_fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  if (overran) {
    return make_error(ErrorCode::k_deadline_exceeded,
                      argv[0] + " was still running at the job's time limit (--job-timeout) and was killed");
  }
  return result;
}

}  // namespace kcache::server
