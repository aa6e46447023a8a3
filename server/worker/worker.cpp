#include "worker/worker.hpp"

#include "worker/cpus.hpp"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <new>
#include <set>
#include <string>

#include "image_proto.hpp"
#include "kcache/worker/worker.pb.h"
#include "sanitizers.hpp"
#include "wire/wire.hpp"
#include "worker/channel.hpp"
#include "worker/fault_hook.hpp"

extern char** environ;

namespace kcache::server::worker {
namespace {

using worker_protocol::Hello;
using worker_protocol::ImageRef;
using worker_protocol::Job;
using worker_protocol::Result;
using worker_protocol::Setup;
using worker_protocol::StepJob;
using worker_protocol::StepOutcome;

using Clock = std::chrono::steady_clock;

constexpr int k_channel_fd = 3;                              // the worker's end of its socket pair
constexpr auto k_start_timeout = std::chrono::seconds(120);  // toolchain detection runs ptxas

CubinAssembler parse_assembler(const std::string& name) {
  return name == "ptxas" ? CubinAssembler::ptxas : name == "nvjitlink" ? CubinAssembler::nvjitlink
                                                                        : CubinAssembler::automatic;
}

void fill_result(Expected<CompileOutput>& output, Result& result) {
  if (!output) {
    result.set_code(static_cast<std::uint32_t>(output.error().code));
    result.set_message(output.error().message);
    for (const std::string& line : output.error().details) result.add_details(line);
    return;
  }
  for (Image& image : output->images) {
    v1::Image* out = result.add_images();
    to_proto(image.meta, *out);
    out->set_data(std::move(image.data));
  }
  for (std::string& d : output->diagnostics) result.add_diagnostics(std::move(d));
}

// What a person reads when LLVM stopped on the module. SelectionDAG's "Cannot select: intrinsic
// %llvm.nvvm.wgmma..." means an instruction of another GPU generation: say which and for which
// archs, rather than LLVM's words alone.
std::string fatal_error_message(std::string_view what, const Job& job) {
  std::set<std::string> arch_set;
  for (const ImageRef& ref : job.images()) arch_set.insert(ref.arch());
  std::string archs;
  for (const std::string& arch : arch_set) archs += (archs.empty() ? "" : ", ") + arch;
  constexpr std::string_view k_cannot_select = "Cannot select: intrinsic %";
  if (auto at = what.find(k_cannot_select); at != std::string_view::npos) {
    std::string_view name = what.substr(at + k_cannot_select.size());
    name = name.substr(0, std::min<std::size_t>(name.find_first_of(" \n"), 200));
    return "the module uses '" + std::string(name) + "', an instruction the asked archs (" + archs +
           ") do not have: it was likely made for another GPU generation. Compile it for an arch that has it, or "
           "guard the code by arch in the source (LLVM: " + std::string(what.substr(0, 300)) + ")";
  }
  return "LLVM stopped compiling this module for " + archs + ": " + std::string(what.substr(0, 2000)) +
         ". The module asks for something the target cannot do (for example an intrinsic of another GPU "
         "generation); if it should compile, report it with the module attached";
}

// Runs a build step from the daemon (checked there) with this worker's toolchain.
void run_step_job(const Compiler& compiler, Job& job, Result& result) {
  static const std::vector<unsigned> k_all_cpus = CpuSlots::allowed();
  CpuSlots::pin({job.cpus().begin(), job.cpus().end()}, k_all_cpus);
  const StepJob& step = job.step();
  StepWork work;
  work.tool = wire::from_proto(step.tool()).value_or(StepTool::cicc);
  work.args.assign(step.args().begin(), step.args().end());
  for (const v1::StepFile& file : step.inputs()) work.inputs.emplace_back(file.name(), file.content());
  work.outputs.assign(step.outputs().begin(), step.outputs().end());
  work.program = step.program();
  if (job.time_left_ms() > 0) work.deadline = Clock::now() + std::chrono::milliseconds(job.time_left_ms());
  auto run = run_step(compiler.toolchain(), work);
  if (!run) {
    result.set_code(static_cast<std::uint32_t>(run.error().code));
    result.set_message(run.error().message);
    return;
  }
  StepOutcome* outcome = result.mutable_step();
  outcome->set_exit_code(run->exit_code);
  outcome->set_stdout_text(std::move(run->stdout_text));
  outcome->set_stderr_text(std::move(run->stderr_text));
  for (auto& [name, bytes] : run->outputs) {
    v1::StepFile* file = outcome->add_outputs();
    file->set_name(name);
    file->set_content(std::move(bytes));
  }
}

// Runs one job from the daemon.
Expected<CompileOutput> run_job(const Compiler& compiler, Job& job) {
  auto spec = wire::job_spec(job.request(), compiler.toolchain().host_triple, compiler.toolchain().max_ptx_version);
  if (!spec) return spec.error();
  spec->ptx_isa_cap = static_cast<int>(job.ptx_isa_cap());
  CompileJob compile_job{*spec, wire::modules_of(job.request()), {}, {}, Clock::time_point::max()};
  for (const wire::NamedBytes& h : wire::headers_of(job.request())) compile_job.headers.emplace_back(h.name, h.bytes);
  for (const ImageRef& ref : job.images()) {
    std::optional<ImageKind> kind = wire::from_proto(ref.kind());
    if (!kind) return make_error(ErrorCode::k_internal, "a job image without a kind");
    compile_job.images.push_back({ref.arch(), *kind});
  }
  if (job.time_left_ms() > 0) compile_job.deadline = Clock::now() + std::chrono::milliseconds(job.time_left_ms());
  // The CPUs this job was lent, for it and the assembler threads and processes it starts; a job
  // lent none runs anywhere (the worker's first affinity set, before any job pinned it).
  static const std::vector<unsigned> k_all_cpus = CpuSlots::allowed();
  compile_job.cpus.assign(job.cpus().begin(), job.cpus().end());
  CpuSlots::pin(compile_job.cpus, k_all_cpus);
  fault_hook(compile_job);
  return compiler.compile(compile_job);
}

Setup setup_message(const std::vector<ToolRun>& runs) {
  Setup setup;
  for (const ToolRun& run : runs) {
    worker_protocol::ToolRun* out = setup.add_tool_runs();
    out->set_program(run.program);
    out->set_device(run.identity.device);
    out->set_inode(run.identity.inode);
    out->set_size(run.identity.size);
    out->set_mtime_ns(run.identity.mtime_ns);
    out->set_ctime_ns(run.identity.ctime_ns);
    out->set_question(run.question);
    out->set_exit_code(run.exit_code);
    out->set_output(run.output);
  }
  return setup;
}

std::vector<ToolRun> tool_runs_of(const Setup& setup) {
  std::vector<ToolRun> runs;
  for (const worker_protocol::ToolRun& run : setup.tool_runs()) {
    runs.push_back({run.program(),
                    {run.device(), run.inode(), run.size(), run.mtime_ns(), run.ctime_ns()},
                    run.question(),
                    run.exit_code(),
                    run.output()});
  }
  return runs;
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* abbrev = sigabbrev_np(sig);
    return "was killed by signal " + std::to_string(sig) + " (SIG" + (abbrev ? abbrev : "?") + ", " + strsignal(sig) + ")";
  }
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "ended with wait status " + std::to_string(status);
}

}  // namespace

int worker_main(int argc, char** argv) {
  WorkerConfig config;
  CLI::App app{"kcached compile worker (started by kcached itself)", "kcached --worker"};
  bool worker_mode = false;
  app.add_flag("--worker", worker_mode, "Serve compile jobs on fd 3");
  app.add_option("--cuda-root", config.cuda_root);
  app.add_option("--rocm-device-libs", config.rocm_device_libs);
  app.add_option("--cubin-assembler", config.cubin_assembler);
  app.add_option("--log-level", config.log_level);
  app.add_option("--memory-limit", config.memory_limit);
  app.add_option("--jail", config.jail);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spdlog::set_default_logger(spdlog::stderr_color_mt("worker"));
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [worker %P] [%l] %v");
  spdlog::set_level(spdlog::level::from_str(config.log_level));
  ::signal(SIGPIPE, SIG_IGN);
  if (config.memory_limit > 0) {
    if (k_asan) {
      spdlog::debug("built with AddressSanitizer, whose shadow memory needs the whole address space: no memory limit");
    } else {
      rlimit limit{config.memory_limit, config.memory_limit};
      if (setrlimit(RLIMIT_AS, &limit) != 0) spdlog::warn("cannot set the memory limit: {}", std::strerror(errno));
    }
  }

  throw_bad_alloc_from_llvm();
  throw_fatal_errors_from_llvm();
  Setup setup;
  if (auto received = receive_message(k_channel_fd, setup); !received) {
    if (received.error().code == ErrorCode::k_unavailable) return 0;  // the daemon closed the channel
    spdlog::error("bad setup from the daemon: {}", received.error().message);
    return 1;
  }
  ToolRuns runs(tool_runs_of(setup));
  Toolchain toolchain = detect_toolchain(config.cuda_root, parse_assembler(config.cubin_assembler), ToolkitLibraries::load,
                                         config.rocm_device_libs, &runs);
  // Every tool this worker runs (steps, ptxas, nvlink, ld.lld) runs on a peer's bytes: jailed.
  toolchain.jail = std::make_shared<const Jail>(
      config.jail == "bwrap" ? Jail::bwrap(jail_policy(toolchain, k_asan ? 0 : config.memory_limit))
                             : Jail::none("the daemon found no jail"));
  Compiler compiler(std::move(toolchain));
  Hello hello;
  hello.set_fingerprint(to_hex(compiler.toolchain().fingerprint));
  hello.set_nvjitlink_version(compiler.toolchain().nvjitlink_version);
  hello.set_nvrtc_version(compiler.toolchain().nvrtc_version);
  hello.set_pid(getpid());
  if (!send_message(k_channel_fd, hello)) return 1;

  for (;;) {
    Job job;
    if (auto received = receive_message(k_channel_fd, job); !received) {
      if (received.error().code == ErrorCode::k_unavailable) return 0;  // the daemon closed the channel
      spdlog::error("bad job from the daemon: {}", received.error().message);
      return 1;
    }
    Result result;
    bool leave = false;  // the heap or LLVM may be in any state: a fresh worker takes the next job
    try {
      if (job.has_step()) {
        run_step_job(compiler, job, result);
      } else {
        auto output = run_job(compiler, job);
        fill_result(output, result);
      }
    } catch (const std::bad_alloc&) {
      // The heap may be in any state: report, then leave so the daemon starts a fresh worker.
      leave = true;
      result.Clear();
      result.set_code(static_cast<std::uint32_t>(ErrorCode::k_resource_exhausted));
      result.set_message("the compile of key " + job.key() + " ran out of memory in its worker (limit " +
                         std::to_string(config.memory_limit) + " bytes, --worker-memory)");
      result.set_exiting(true);
    } catch (const LlvmFatalError& e) {
      leave = true;
      result.Clear();
      result.set_code(static_cast<std::uint32_t>(ErrorCode::k_invalid_argument));
      result.set_message(fatal_error_message(e.what(), job));
      result.set_exiting(true);
    }
    if (!send_message(k_channel_fd, result) || leave) return leave ? 1 : 0;
  }
}

WorkerSet::WorkerSet(std::filesystem::path executable, WorkerConfig config)
    : m_executable(std::move(executable)), m_config(std::move(config)) {}

WorkerSet::~WorkerSet() {
  std::lock_guard lock(m_mutex);
  for (Process& p : m_idle) {
    ::close(p.fd);  // an idle worker exits when its channel closes
    p.fd = -1;
    reap(p, false);
  }
  m_idle.clear();
}

Expected<WorkerSet::Process> WorkerSet::spawn() {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return make_error(ErrorCode::k_internal, std::string("socketpair: ") + std::strerror(errno));
  }
  if (fds[1] == k_channel_fd) {  // dup2 onto itself would keep close-on-exec
    int moved = ::fcntl(fds[1], F_DUPFD_CLOEXEC, k_channel_fd + 1);
    ::close(fds[1]);
    fds[1] = moved;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], k_channel_fd);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);  // stdout is the daemon's, for people
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);  // the daemon blocks SIGTERM/SIGINT in its threads
  // Its own process group: a Ctrl-C meant for the daemon does not kill jobs it is finishing.
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETPGROUP);

  std::vector<std::string> args = {m_executable.string(),   "--worker",
                                    "--cuda-root",          m_config.cuda_root.string(),
                                    "--cubin-assembler",    m_config.cubin_assembler,
                                    "--log-level",          m_config.log_level,
                                    "--memory-limit",       std::to_string(m_config.memory_limit),
                                    "--jail",               m_config.jail,
                                    "--rocm-device-libs",   m_config.rocm_device_libs.string()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  Process p;
  int rc = posix_spawn(&p.pid, m_executable.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    return make_error(ErrorCode::k_internal,
                      "cannot start a compile worker (" + m_executable.string() + "): " + std::strerror(rc));
  }
  p.fd = fds[0];
  // A worker that cannot take it has died: await_hello says how.
  if (auto sent = send_message(p.fd, setup_message(m_config.tool_runs)); !sent) {
    spdlog::debug("a compile worker (pid {}) did not take its setup: {}", p.pid, sent.error().message);
  }
  return p;
}

Expected<void> WorkerSet::await_hello(Process& p) {
  Hello hello;
  if (auto r = receive_message(p.fd, hello, Clock::now() + k_start_timeout); !r) {
    std::string how = reap(p, true);
    return make_error(ErrorCode::k_internal, "a compile worker (pid " + std::to_string(p.pid) +
                                                 ") did not start: " + r.error().message + "; it " + how);
  }
  Report report{hello.fingerprint(), hello.nvjitlink_version(), hello.nvrtc_version()};
  if (!m_reference) m_reference = report;  // the first worker of start(), before any other runs
  if (report.fingerprint_hex != m_reference->fingerprint_hex ||
      report.nvjitlink_version != m_reference->nvjitlink_version ||
      report.nvrtc_version != m_reference->nvrtc_version) {
    reap(p, true);
    return make_error(ErrorCode::k_failed_precondition,
                      "a compile worker detected toolchain " + report.fingerprint_hex.substr(0, 16) + ", kcached has " +
                          m_reference->fingerprint_hex.substr(0, 16) +
                          ": the toolkit changed under the daemon; restart kcached");
  }
  p.ready = true;
  return {};
}

void WorkerSet::replace() {
  ++m_restarts;
  auto p = spawn();
  if (!p) {
    spdlog::error("cannot start a replacement compile worker: {}", p.error().message);  // the next job tries again
    return;
  }
  std::lock_guard lock(m_mutex);
  m_idle.push_back(*p);
}

std::string WorkerSet::reap(Process& p, bool kill_first) {
  if (p.fd >= 0) ::close(p.fd);
  p.fd = -1;
  if (p.pid <= 0) return "was not running";
  if (kill_first) ::kill(p.pid, SIGKILL);
  int status = 0;
  while (::waitpid(p.pid, &status, 0) < 0 && errno == EINTR) {
  }
  p.pid = -1;
  return describe_status(status);
}

Expected<WorkerSet::Report> WorkerSet::start(std::size_t count) {
  auto p = spawn();
  if (!p) return p.error();
  Expected<void> hello = await_hello(*p);
  p->ready = true;
  {
    std::lock_guard lock(m_mutex);
    if (p->pid > 0) m_idle.push_back(*p);
    m_unstarted = count > 0 ? count - 1 : 0;
  }
  if (!hello) return hello.error();
  if (!m_reference) return make_error(ErrorCode::k_internal, "no compile worker was started");
  return *m_reference;
}

Expected<CompileOutput> WorkerSet::compile(const CompileJob& job, const Key& key) {
  Job message;
  message.set_key(key.hex());
  wire::fill_request(job.spec, *message.mutable_request());
  wire::set_modules(job.spec, job.modules, *message.mutable_request());
  std::vector<wire::NamedBytes> headers;
  for (const auto& [name, bytes] : job.headers) headers.push_back({name, bytes});
  wire::set_headers(headers, *message.mutable_request());
  message.set_ptx_isa_cap(static_cast<std::uint32_t>(job.spec.ptx_isa_cap));
  message.mutable_cpus()->Assign(job.cpus.begin(), job.cpus.end());
  for (const ImageRequest& r : job.images) {
    ImageRef* ref = message.add_images();
    ref->set_arch(r.arch);
    ref->set_kind(wire::to_proto(r.kind));
  }
  auto result = exchange(message, job.deadline, key);
  if (!result) return result.error();
  CompileOutput output;
  for (v1::Image& proto : *result->mutable_images()) {
    auto image = image_from_proto(std::move(proto));
    if (!image) {
      return make_error(ErrorCode::k_internal, "the worker compiling key " + key.hex() + " sent a bad image: " +
                                                   image.error().message);
    }
    output.images.push_back(std::move(*image));
  }
  output.diagnostics.assign(result->diagnostics().begin(), result->diagnostics().end());
  return output;
}

Expected<StepRun> WorkerSet::run_step(const StepWork& work, const std::vector<unsigned>& cpus, const Key& key) {
  Job message;
  message.set_key(key.hex());
  message.mutable_cpus()->Assign(cpus.begin(), cpus.end());
  StepJob* step = message.mutable_step();
  step->set_tool(wire::to_proto(work.tool));
  for (const std::string& arg : work.args) step->add_args(arg);
  for (const auto& [name, bytes] : work.inputs) {
    v1::StepFile* file = step->add_inputs();
    file->set_name(name);
    file->set_content(std::string(bytes));
  }
  for (const std::string& name : work.outputs) step->add_outputs(name);
  step->set_program(work.program.string());
  auto result = exchange(message, work.deadline, key);
  if (!result) return result.error();
  StepOutcome* outcome = result->mutable_step();
  StepRun run;
  run.exit_code = outcome->exit_code();
  run.stdout_text = std::move(*outcome->mutable_stdout_text());
  run.stderr_text = std::move(*outcome->mutable_stderr_text());
  for (v1::StepFile& file : *outcome->mutable_outputs()) {
    run.outputs.emplace_back(std::move(*file.mutable_name()), std::move(*file.mutable_content()));
  }
  return run;
}

Expected<Result> WorkerSet::exchange(Job& message, Clock::time_point deadline, const Key& key) {
  // The worker gets the same deadline, for ptxas; whichever sees it first ends the job.
  Clock::time_point wait_until = Clock::time_point::max();
  if (deadline != Clock::time_point::max()) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    message.set_time_left_ms(static_cast<std::uint64_t>(std::max<long long>(left, 1)));
    wait_until = deadline;
  }

  // A worker that died while idle (the OOM killer, an operator) costs no job: try another.
  for (int attempt = 0;; ++attempt) {
    Process p;
    bool first_of_its_thread = false;  // a worker start() made room for, started for this job
    {
      std::lock_guard lock(m_mutex);
      if (!m_idle.empty()) {
        p = m_idle.back();
        m_idle.pop_back();
      } else if (m_unstarted > 0) {
        --m_unstarted;
        first_of_its_thread = true;
      }
    }
    // None idle: this thread's worker was never needed before, or its replacement failed to start.
    if (p.pid < 0) {
      if (!first_of_its_thread) ++m_restarts;
      auto spawned = spawn();
      if (!spawned) {
        if (first_of_its_thread) {
          std::lock_guard lock(m_mutex);
          ++m_unstarted;
        }
        return spawned.error();
      }
      p = *spawned;
    }
    if (!p.ready) {
      if (auto hello = await_hello(p); !hello) return hello.error();
    }
    // A job that waited past its deadline (in the pool's queue, or for this worker's start) is
    // not started: sent, it would only get its worker killed and replaced.
    if (Clock::now() >= deadline) {
      {
        std::lock_guard lock(m_mutex);
        m_idle.push_back(p);
      }
      return make_error(ErrorCode::k_deadline_exceeded,
                        "the compile of key " + key.hex() +
                            " waited past its time limit (--job-timeout) for a free worker, so it was not started; "
                            "retry when the daemon is less busy");
    }
    const std::string who = "the worker compiling key " + key.hex() + " (pid " + std::to_string(p.pid) + ")";
    if (auto sent = send_message(p.fd, message); !sent) {
      std::string how = reap(p, true);
      ++m_crashes;
      replace();
      if (attempt == 0) {
        spdlog::warn("an idle compile worker had ended ({}); trying another", how);
        continue;
      }
      return make_error(ErrorCode::k_internal, who + " could not take the job: it " + how);
    }
    Result result;
    if (auto received = receive_message(p.fd, result, wait_until); !received) {
      ++m_crashes;
      if (received.error().code == ErrorCode::k_deadline_exceeded) {
        reap(p, true);
        replace();
        return make_error(ErrorCode::k_deadline_exceeded,
                          "the compile of key " + key.hex() + " ran past its time limit (--job-timeout); " + who +
                              " was killed and will be replaced");
      }
      std::string how = reap(p, received.error().code != ErrorCode::k_unavailable);
      replace();
      std::string hint = m_config.memory_limit > 0 && how.find("SIGABRT") != std::string::npos
                             ? " (an abort here is often the worker's memory limit, --worker-memory " +
                                   std::to_string(m_config.memory_limit) + " bytes)"
                             : "";
      spdlog::error("{} {}{}; the job failed, the next job gets a new worker", who, how, hint);
      return make_error(ErrorCode::k_internal, who + " " + how + hint +
                                                   ": that compile failed, other jobs are unaffected; the module may "
                                                   "crash LLVM or ptxas (report it with the module attached)");
    }
    if (result.exiting()) {
      reap(p, false);
      ++m_crashes;
      replace();
    } else {
      std::lock_guard lock(m_mutex);
      m_idle.push_back(p);
    }
    if (result.code() != 0) {
      return make_error(static_cast<ErrorCode>(result.code()), result.message(),
                        {result.details().begin(), result.details().end()});
    }
    return result;
  }
}

}  // namespace kcache::server::worker
