#include "launcher/launcher.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "endpoint.hpp"
#include "kcache/client.hpp"
#include "kcache/process.hpp"
#include "kcache/sha256.hpp"
#include "kcache/step.hpp"
#include "launcher/nvcc_plan.hpp"

extern char** environ;

namespace kcache::launcher {
namespace {

namespace fs = std::filesystem;

// Counters of this machine's launches, kept in the client's state folder (`launcher-stats`):
// "name count" lines, updated under an flock. `kcache stats` prints them.
class LocalStats {
 public:
  void add(std::string name) {
    for (char& c : name) {
      if (c == ' ' || c == '\n' || c == '\t') c = '_';
    }
    ++m_counts[name];
  }
  ~LocalStats() { write(); }
  // Adds this launch's counts to the file's.
  void write() {
    if (m_counts.empty()) return;
    fs::path dir = state_dir();
    if (dir.empty()) return;
    std::error_code ec;
    fs::create_directories(dir, ec);
    int fd = ::open((dir / "launcher-stats").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (::flock(fd, LOCK_EX) == 0) {
      std::string text;
      char buf[4096];
      for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
      std::map<std::string, unsigned long long> counts;
      std::istringstream in(text);
      std::string name;
      unsigned long long count = 0;
      while (in >> name >> count) counts[name] += count;
      for (const auto& [n, c] : m_counts) counts[n] += c;
      std::string out;
      for (const auto& [n, c] : counts) out += n + " " + std::to_string(c) + "\n";
      if (::ftruncate(fd, 0) == 0 && ::lseek(fd, 0, SEEK_SET) == 0) {
        [[maybe_unused]] ssize_t w = ::write(fd, out.data(), out.size());
      }
    }
    ::close(fd);
    m_counts.clear();
  }

 private:
  std::map<std::string, unsigned long long> m_counts;
};

// SHA-256s of the toolkit's and host compiler's programs (150 MB for cicc and ptxas), kept in
// the state folder (`tools`) by path, size, modification time and inode, so a launch hashes a
// program once per change of it, not once per compile.
Expected<Digest> file_digest(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return make_error(ErrorCode::k_not_found, "cannot find " + path);
  std::string identity = std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
                         std::to_string(st.st_mtim.tv_nsec) + " " + std::to_string(st.st_ino) + " " + path;
  fs::path table = state_dir().empty() ? fs::path() : state_dir() / "tools";
  if (!table.empty()) {
    std::ifstream in(table);
    for (std::string line; std::getline(in, line);) {
      if (line.size() > 65 && line.compare(65, std::string::npos, identity) == 0) {
        if (auto d = digest_from_hex(line.substr(0, 64))) return *d;
      }
    }
  }
  auto digest = sha256_file(path);
  if (!digest) return make_error(ErrorCode::k_not_found, "cannot read " + path);
  if (!table.empty()) {
    std::error_code ec;
    fs::create_directories(table.parent_path(), ec);
    std::ofstream(table, std::ios::app) << to_hex(*digest) << " " << identity << "\n";
  }
  return *digest;
}

std::string basename_of(std::string_view path) {
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// `name` as PATH (of `env`) finds it; a name with a '/' is itself.
std::string find_program(const std::string& name, const std::map<std::string, std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  auto it = env.find("PATH");
  std::string path = it == env.end() ? "/usr/bin:/bin" : it->second;
  for (std::size_t begin = 0; begin <= path.size();) {
    std::size_t end = std::min(path.find(':', begin), path.size());
    std::string candidate = path.substr(begin, end - begin) + "/" + name;
    if (end > begin && ::access(candidate.c_str(), X_OK) == 0) return candidate;
    begin = end + 1;
  }
  return {};
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool write_file(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

// Puts `from` at `to` whole or not at all: a compile killed part-way leaves no half object.
bool move_into_place(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::path staged = to;
  staged += ".kcache-" + std::to_string(::getpid());
  fs::copy_file(from, staged, fs::copy_options::overwrite_existing, ec);
  if (ec) return false;
  fs::rename(staged, to, ec);
  if (ec) fs::remove(staged, ec);
  return !ec;
}

// nvcc's temporary names carry its process ID and a counter (tmpxft_0000a1b2_00000000-6_a.ptx);
// written as one fixed name, the same work has the same names, and so the same key and bytes.
std::string fixed_temporary_names(std::string word) {
  constexpr std::string_view k_prefix = "tmpxft_";
  for (std::size_t at = word.find(k_prefix); at != std::string::npos; at = word.find(k_prefix, at + 1)) {
    std::size_t i = at + k_prefix.size();
    auto hex_run = [&](std::size_t from) {
      if (from + 8 > word.size()) return false;
      for (std::size_t k = from; k < from + 8; ++k) {
        if (!std::isxdigit(static_cast<unsigned char>(word[k]))) return false;
      }
      return true;
    };
    if (hex_run(i) && i + 8 < word.size() && word[i + 8] == '_' && hex_run(i + 9)) {
      word.replace(i, 17, "00000000_00000000");
    }
  }
  return word;
}

// A folder of this launch's own for nvcc's temporary files, removed at the end.
class WorkFolder {
 public:
  WorkFolder() {
    std::string pattern = (fs::temp_directory_path() / "kcache-nvcc-XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) m_path = pattern;
  }
  ~WorkFolder() {
    std::error_code ec;
    if (!m_path.empty()) fs::remove_all(m_path, ec);
  }
  const std::string& path() const { return m_path; }

 private:
  std::string m_path;
};

// What the launcher prints once the compile has succeeded (a failure reruns nvcc, which prints
// its own).
struct Printed {
  std::string out, err;
  void add(std::string_view o, std::string_view e) { out += o, err += e; }
  void flush() const {
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fwrite(err.data(), 1, err.size(), stderr);
    std::fflush(stdout);
    std::fflush(stderr);
  }
};

// Runs the real compiler in place of this process: its outputs, diagnostics and exit code.
[[noreturn]] void exec_compiler(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "kcache: cannot run %s: %s\n", argv[0].c_str(), std::strerror(errno));
  std::exit(127);
}

// Options after which nvcc does something other than compile one file to an object.
std::optional<std::string> uncacheable_option(const std::vector<std::string>& args) {
  static const std::vector<std::string_view> k_modes = {
      "-E",       "--preprocess", "-M",      "--generate-dependencies", "-MM", "--generate-nonsystem-dependencies",
      "-run",     "--run",        "-lib",    "--lib",                   "-link", "--link",
      "-dlink",   "--device-link", "-ptx",   "--ptx",                   "-cubin", "--cubin",
      "-fatbin",  "--fatbin",     "-cuda",   "--cuda",                  "-optix-ir", "--optix-ir",
      "-dryrun",  "--dryrun",     "-V",      "--version",               "-h", "--help",
      "-keep",    "--keep",       "-save-temps", "--save-temps",        "-keep-dir", "--keep-dir",
      "-lto",     "-dlto",        "--dlink-time-opt", "-odir",          "--output-directory", "-ltoir", "--ltoir"};
  bool compile = false;
  for (const std::string& a : args) {
    for (std::string_view mode : k_modes) {
      if (a == mode) return "option " + a;
    }
    if (a == "-c" || a == "--compile" || a == "-dc" || a == "--device-c" || a == "-dw" || a == "--device-w") {
      compile = true;
    }
  }
  if (!compile) return std::string("not a compile (linking)");
  return std::nullopt;
}

class NvccLaunch {
 public:
  NvccLaunch(std::string nvcc, std::vector<std::string> args) : m_nvcc(std::move(nvcc)), m_args(std::move(args)) {}

  int run() {
    std::vector<std::string> real = {m_nvcc};
    real.insert(real.end(), m_args.begin(), m_args.end());
    if (auto reason = expand_options_files()) return unchanged(real, *reason);
    if (auto reason = uncacheable_option(m_args)) return unchanged(real, *reason);
    if (m_work.path().empty()) return unchanged(real, "no temporary folder");
    auto planned = plan();
    if (!planned) return unchanged(real, *planned.error_reason);
    m_stats.add("launcher.compiles");
    for (const PlanStep& step : m_steps) {
      bool ok = true;
      switch (step.kind) {
        case PlanStep::Kind::assign: m_env[step.name] = step.value; break;
        case PlanStep::Kind::remove:
          for (const std::string& f : step.argv) {
            std::error_code ec;
            fs::remove(f, ec);
          }
          break;
        case PlanStep::Kind::filter_deps: ok = write_dependencies(step.target); break;
        case PlanStep::Kind::run: ok = run_step(step.argv); break;
      }
      if (!ok) {
        // A failed step: nvcc itself says what failed, with its exit code, and nothing is kept.
        m_stats.add("launcher.failed");
        real[0] = m_nvcc;
        return run_unchanged(real);
      }
    }
    for (const auto& [from, to] : m_finals) {
      if (!move_into_place(from, to)) {
        std::fprintf(stderr, "kcache: cannot write %s\n", to.c_str());
        return 1;
      }
    }
    m_printed.flush();
    return 0;
  }

 private:
  struct Planned {
    std::optional<std::string> error_reason;
    explicit operator bool() const { return !error_reason; }
  };

  // --options-file / -optf FILE: its words in its place, as nvcc reads them.
  std::optional<std::string> expand_options_files() {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < m_args.size(); ++i) {
      const std::string& a = m_args[i];
      std::string file;
      if ((a == "--options-file" || a == "-optf") && i + 1 < m_args.size()) {
        file = m_args[++i];
      } else if (a.starts_with("--options-file=")) {
        file = a.substr(15);
      } else {
        out.push_back(a);
        continue;
      }
      std::ifstream in(file);
      if (!in) return "options file unreadable";
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      for (char& c : text) {
        if (c == '\n' || c == '\r') c = ' ';
      }
      auto words = shell_words(text, {});
      if (!words) return "options file syntax";
      out.insert(out.end(), words->begin(), words->end());
    }
    m_args = std::move(out);
    return std::nullopt;
  }

  Planned plan() {
    std::vector<std::string> dry = {m_nvcc, "--dryrun"};
    dry.insert(dry.end(), m_args.begin(), m_args.end());
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      if (!std::string_view(*e).starts_with("TMPDIR=")) env.emplace_back(*e);
    }
    env.push_back("TMPDIR=" + m_work.path());
    ProcessOptions options;
    options.output = ProcessOptions::Output::separate;
    options.env = &env;
    options.search_path = true;
    auto ran = run_process(dry, options);
    if (!ran || ran->exit_code != 0) return {"nvcc --dryrun failed"};
    for (const std::string& e : env) {
      auto eq = e.find('=');
      if (eq != std::string::npos) m_env[e.substr(0, eq)] = e.substr(eq + 1);
    }
    std::map<std::string, std::string> vars = m_env;
    auto steps = parse_plan(ran->error_output, vars);
    if (!steps) return {"plan syntax"};
    m_steps = std::move(*steps);
    for (PlanStep& step : m_steps) {
      for (std::string& w : step.argv) w = fixed_temporary_names(std::move(w));
      step.target = fixed_temporary_names(std::move(step.target));
      if (step.kind != PlanStep::Kind::run) continue;
      static const std::vector<std::string_view> k_known = {"cicc", "ptxas", "cudafe++", "fatbinary", "nvlink"};
      std::string program = basename_of(step.argv.front());
      bool known = std::find(k_known.begin(), k_known.end(), program) != k_known.end() || is_host_compile_program(program);
      if (!known) return {"plan step " + program};
    }
    return {};
  }

  bool is_host_compile_program(const std::string& program) const {
    static const std::vector<std::string_view> k_hosts = {"gcc", "g++", "cc", "c++", "clang", "clang++"};
    if (std::find(k_hosts.begin(), k_hosts.end(), program) != k_hosts.end()) return true;
    return program.starts_with("gcc-") || program.starts_with("g++-") || program.starts_with("clang++-") ||
           program.starts_with("clang-") || program.ends_with("-gcc") || program.ends_with("-g++");
  }

  std::vector<std::string> env_list() const {
    std::vector<std::string> out;
    for (const auto& [k, v] : m_env) out.push_back(k + "=" + v);
    return out;
  }

  // Runs argv here: in `cwd` (empty: the caller's), output kept for the end.
  bool run_here(const std::vector<std::string>& argv, const std::string& cwd = {}, ProcessResult* result = nullptr,
                bool print = true) {
    std::vector<std::string> env = env_list();
    ProcessOptions options;
    options.output = ProcessOptions::Output::separate;
    options.env = &env;
    options.search_path = true;
    options.cwd = cwd;
    auto ran = run_process(argv, options);
    if (!ran) return false;
    if (ran->exit_code != 0 || ran->signal != 0) return false;
    if (print) m_printed.add(ran->output, ran->error_output);
    if (result) *result = std::move(*ran);
    return true;
  }

  bool run_step(const std::vector<std::string>& argv) {
    std::string program = basename_of(argv.front());
    if (program == "cicc") return device_step(StepTool::cicc, argv);
    if (program == "ptxas") return device_step(StepTool::ptxas, argv);
    if (is_host_compile_program(program) && is_host_compile(argv)) return host_step(argv);
    if (is_host_compile_program(program)) remember_preprocessed(argv);
    return run_here(argv);
  }

  // A preprocessor run whose output the dependency filter reads.
  void remember_preprocessed(const std::vector<std::string>& argv) {
    if (std::find(argv.begin(), argv.end(), "-E") == argv.end()) return;
    for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "-o") m_preprocessed.push_back(argv[i + 1]);
    }
  }

  bool is_host_compile(const std::vector<std::string>& argv) const {
    if (std::find(argv.begin(), argv.end(), "-c") == argv.end()) return false;
    return std::any_of(argv.begin(), argv.end(), [&](const std::string& a) {
      return a.starts_with(m_work.path() + "/") && a.ends_with(".cudafe1.cpp");
    });
  }

  bool write_dependencies(const std::string& target) {
    std::vector<std::string> texts;
    for (const std::string& f : m_preprocessed) texts.push_back(read_file(f));
    std::string rule_target;
    bool phony = false;
    for (std::size_t i = 0; i < m_args.size(); ++i) {
      if ((m_args[i] == "-MT" || m_args[i] == "--dependency-target-name") && i + 1 < m_args.size()) rule_target = m_args[i + 1];
      if (m_args[i] == "-MP" || m_args[i] == "--generate-dependency-targets") phony = true;
    }
    if (rule_target.empty()) rule_target = output_path();
    fs::path staged = fs::path(m_work.path()) / "kcache-dependencies.d";
    if (!write_file(staged, dependency_file(rule_target, texts, phony))) return false;
    m_finals.emplace_back(staged.string(), target);
    return true;
  }

  // The object nvcc writes: -o, else the source's name with .o.
  std::string output_path() const {
    for (std::size_t i = 0; i + 1 < m_args.size(); ++i) {
      if (m_args[i] == "-o" || m_args[i] == "--output-file") return m_args[i + 1];
    }
    for (const std::string& a : m_args) {
      if (a.ends_with(".cu")) return fs::path(basename_of(a)).replace_extension(".o").string();
    }
    return "a.o";
  }

  kcache::Client* client() {
    if (!m_client && !m_daemon_down) {
      ClientOptions options(resolve_server(""), std::chrono::minutes(10));
      if (auto token = resolve_token(""); token) options.token = *token;
      options.max_attempts = 1;
      m_client.emplace(options);
    }
    return m_daemon_down ? nullptr : &*m_client;
  }

  // The daemon's answer to a step, or nullopt when it cannot give one (the step then runs here).
  std::optional<v1::StepResponse> ask_daemon(const v1::StepRequest& request, StepTool tool) {
    kcache::Client* c = client();
    if (c == nullptr) return std::nullopt;
    auto answer = c->step(request);
    if (answer) return *answer;
    const std::string tool_name(step_tool_name(tool));
    if (answer.error().code == ErrorCode::k_unavailable || answer.error().code == ErrorCode::k_deadline_exceeded) {
      m_daemon_down = true;  // no later step waits for it again
      m_stats.add("launcher.daemon_unreachable");
    } else {
      m_stats.add("launcher.refused." + tool_name);
      if (std::getenv("KCACHE_LAUNCHER_DEBUG")) std::fprintf(stderr, "kcache: %s\n", answer.error().message.c_str());
    }
    return std::nullopt;
  }

  // cicc or ptxas, run on the daemon (or here, the same way, when the daemon cannot). nvcc names
  // its files after the source, a counter and, with several archs, the arch (-7_saxpy.compute_80.ptx
  // against -6_saxpy.ptx with one); the step names them by order and extension instead (f0.ii,
  // f1.ptx, ...), so one arch's work has one key whatever other archs the build asks for. Here it
  // runs in a folder of its own under those names.
  bool device_step(StepTool tool, const std::vector<std::string>& argv) {
    const std::string tool_name(step_tool_name(tool));
    const std::string prefix = m_work.path() + "/";
    StepSpec spec;
    spec.tool = tool;
    std::vector<std::pair<std::string, std::string>> files;  // (name in the step, path in nvcc's plan)
    for (std::size_t i = 1; i < argv.size(); ++i) {
      std::string arg = argv[i];
      if (arg.starts_with(prefix)) {
        auto known = std::find_if(files.begin(), files.end(), [&](const auto& f) { return f.second == arg; });
        if (known == files.end()) {
          std::string name = "f" + std::to_string(files.size()) + fs::path(arg).extension().string();
          std::error_code ec;
          (fs::exists(arg, ec) ? spec.inputs : spec.outputs).push_back(name);
          known = files.emplace(files.end(), name, arg);
        }
        arg = known->first;
      }
      spec.args.push_back(arg);
    }
    auto path_of = [&](const std::string& name) {
      auto f = std::find_if(files.begin(), files.end(), [&](const auto& p) { return p.first == name; });
      return f == files.end() ? std::string() : f->second;
    };
    auto run_locally = [&] {
      m_stats.add(tool_name + ".local");
      fs::path folder = prefix + "step-" + std::to_string(++m_local_steps);
      std::error_code ec;
      fs::create_directory(folder, ec);
      for (const std::string& name : spec.inputs) fs::copy_file(path_of(name), folder / name, ec);
      std::vector<std::string> local = {argv.front()};
      local.insert(local.end(), spec.args.begin(), spec.args.end());
      if (!run_here(local, folder.string())) return false;
      for (const std::string& name : spec.outputs) {
        fs::rename(folder / name, path_of(name), ec);
        if (ec) return false;
      }
      return true;
    };
    if (!check_step(spec)) return run_locally();
    auto identity = tool_identity(tool, argv.front());
    if (!identity) return run_locally();
    spec.tool_digest = *identity;
    v1::StepRequest request;
    request.set_tool(tool == StepTool::cicc ? v1::STEP_TOOL_CICC : v1::STEP_TOOL_PTXAS);
    request.set_tool_digest(to_hex(spec.tool_digest));
    for (const std::string& a : spec.args) request.add_args(a);
    for (const std::string& name : spec.inputs) {
      v1::StepFile* f = request.add_inputs();
      f->set_name(name);
      f->set_content(read_file(path_of(name)));
    }
    for (const std::string& name : spec.outputs) request.add_outputs(name);
    auto answer = ask_daemon(request, tool);
    if (!answer) return run_locally();
    if (answer->exit_code() != 0) return false;  // nvcc reruns and reports it
    for (const v1::StepFile& f : answer->outputs()) {
      std::string path = path_of(f.name());
      if (path.empty() || !write_file(path, f.content())) return false;
    }
    m_printed.add(answer->stdout_text(), answer->stderr_text());
    m_stats.add(tool_name + (answer->outcome() == v1::OUTCOME_MISS ? ".miss" : ".hit"));
    return true;
  }

  Expected<Digest> tool_identity(StepTool tool, const std::string& program) {
    std::vector<Digest> files;
    auto p = file_digest(find_program(program, m_env));
    if (!p) return p.error();
    files.push_back(*p);
    if (tool == StepTool::cicc) {
      auto dir = m_env.find("NVVMIR_LIBRARY_DIR");
      if (dir == m_env.end()) return make_error(ErrorCode::k_not_found, "no NVVMIR_LIBRARY_DIR");
      auto libdevice = file_digest(dir->second + "/libdevice.10.bc");
      if (!libdevice) return libdevice.error();
      files.push_back(*libdevice);
    }
    if (tool == StepTool::host) {
      // The driver and the compiler proper it runs (cc1plus), as it names it.
      auto proper = run_process({find_program(program, m_env), "-print-prog-name=cc1plus"});
      if (proper && proper->exit_code == 0) {
        std::string path = proper->output.substr(0, proper->output.find('\n'));
        if (auto d = file_digest(path)) files.push_back(*d);
      }
      auto version = run_process({find_program(program, m_env), "--version"});
      if (version) files.push_back(sha256(version->output));
    }
    return step_tool_identity(tool, files);
  }

  // The host compile of cudafe++'s output: its object looked up by what the host compiler
  // actually compiles (the preprocessed translation unit, fatbinary included), or compiled here
  // and offered to the daemon, which keeps it behind the host wall.
  bool host_step(const std::vector<std::string>& argv) {
    const std::string prefix = m_work.path() + "/";
    std::string target;
    std::vector<std::string> compile = argv, preprocess, key_args;
    bool debug = false;
    for (std::size_t i = 0; i < compile.size(); ++i) {
      if (compile[i] == "-o" && i + 1 < compile.size()) {
        target = compile[i + 1];
        compile[i + 1] = prefix + "kcache-object.o";
      }
      if (compile[i].starts_with("-g") && compile[i] != "-gno-record-gcc-switches") debug = true;
    }
    for (std::size_t i = 0; i < argv.size(); ++i) {
      const std::string& a = argv[i];
      if (a == "-c") {
        preprocess.push_back("-E");
      } else if (a == "-o" && i + 1 < argv.size()) {
        preprocess.push_back(a);
        preprocess.push_back(prefix + "kcache-host.ii");
        ++i;
        continue;
      } else {
        preprocess.push_back(a);
      }
      // The key's arguments: what changes the object beyond the preprocessed text.
      if (i == 0 || a == "-c") continue;
      bool takes_value = a == "-I" || a == "-isystem" || a == "-include" || a == "-D" || a == "-U" || a == "-iquote";
      if (takes_value) {
        if (i + 1 < argv.size()) preprocess.push_back(argv[++i]);  // the preprocessor's; not the key's
        continue;
      }
      if (a.starts_with("-I") || a.starts_with("-D") || a.starts_with("-U") || a.starts_with(prefix)) continue;
      key_args.push_back(a);
    }
    if (target.empty()) return run_here(argv);
    m_finals.emplace_back(prefix + "kcache-object.o", target);
    auto compile_here = [&] { return run_here(compile); };
    if (debug) {
      m_stats.add("host.local");
      return compile_here();
    }
    ProcessResult preprocessed;
    if (!run_here(preprocess, {}, &preprocessed, false)) return false;  // its warnings: the compile's
    std::string text = read_file(prefix + "kcache-host.ii");
    for (std::size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at)) text.erase(at, prefix.size());
    auto identity = tool_identity(StepTool::host, argv.front());
    if (!identity) return compile_here();
    v1::StepRequest request;
    request.set_tool(v1::STEP_TOOL_HOST);
    request.set_tool_digest(to_hex(*identity));
    for (const std::string& a : key_args) request.add_args(a);
    v1::StepFile* input = request.add_inputs();
    input->set_name("host.ii");
    input->set_sha256(to_hex(sha256(text)));
    request.add_outputs(std::string(k_step_object));
    auto found = ask_daemon(request, StepTool::host);
    if (found && found->exit_code() == 0 && found->outputs_size() == 1) {
      if (!write_file(prefix + "kcache-object.o", found->outputs(0).content())) return false;
      m_printed.add(found->stdout_text(), found->stderr_text());
      m_stats.add("host.hit");
      return true;
    }
    ProcessResult compiled;
    if (!run_here(compile, {}, &compiled)) return false;
    if (!found) {
      m_stats.add("host.local");
      return true;
    }
    m_stats.add("host.miss");
    request.mutable_offered()->set_name(std::string(k_step_object));
    request.mutable_offered()->set_content(read_file(prefix + "kcache-object.o"));
    request.set_offered_stderr(compiled.error_output);
    ask_daemon(request, StepTool::host);  // kept if the daemon takes it; the build goes on either way
    return true;
  }

  // The compile as nvcc would run it, counted by why.
  int unchanged(const std::vector<std::string>& real, const std::string& reason) {
    m_stats.add("uncacheable." + reason);
    ClientOptions options(resolve_server(""), std::chrono::milliseconds(500));
    if (auto token = resolve_token(""); token) options.token = *token;
    options.max_attempts = 1;
    {
      kcache::Client reporter(options);
      [[maybe_unused]] auto reported = reporter.report_uncacheable(reason);
    }
    return run_unchanged(real);
  }

  int run_unchanged(const std::vector<std::string>& real) {
    ProcessOptions options;
    options.output = ProcessOptions::Output::inherit;
    options.search_path = true;
    auto ran = run_process(real, options);
    if (!ran) {
      std::fprintf(stderr, "kcache: %s\n", ran.error().message.c_str());
      return 127;
    }
    return ran->signal != 0 ? 128 + ran->signal : ran->exit_code;
  }

  const std::string m_nvcc;
  std::vector<std::string> m_args;
  LocalStats m_stats;
  WorkFolder m_work;
  std::vector<PlanStep> m_steps;
  std::map<std::string, std::string> m_env;
  std::vector<std::string> m_preprocessed;                 // outputs of the plan's -E runs, in order
  std::vector<std::pair<std::string, std::string>> m_finals;  // (staged, target): moved at the end
  Printed m_printed;
  std::optional<kcache::Client> m_client;
  bool m_daemon_down = false;
  int m_local_steps = 0;  // step folders made for steps run here
};

bool is_nvcc(std::string_view name) { return basename_of(name) == "nvcc"; }

// The nvcc that PATH finds after this program (kcache installed as nvcc early on PATH).
std::string next_nvcc() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "";
  for (std::size_t begin = 0; begin <= p.size();) {
    std::size_t end = std::min(p.find(':', begin), p.size());
    fs::path candidate = fs::path(p.substr(begin, end - begin)) / "nvcc";
    begin = end + 1;
    if (::access(candidate.c_str(), X_OK) != 0) continue;
    fs::path real = fs::canonical(candidate, ec);
    if (ec || real == self || real.filename() == "kcache" || real.filename() == "kcache-grpc") continue;
    return candidate.string();
  }
  return {};
}

}  // namespace

std::optional<int> launch_if_compiler(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (argc >= 1 && is_nvcc(argv[0])) {
    std::string real = next_nvcc();
    if (real.empty()) {
      std::fprintf(stderr, "kcache: run as nvcc, but no other nvcc is on PATH\n");
      return 127;
    }
    return NvccLaunch(real, args).run();
  }
  if (args.empty()) return std::nullopt;
  const std::string first = args.front();
  std::string name = basename_of(first);
  if (is_nvcc(first)) {
    args.erase(args.begin());
    return NvccLaunch(first, args).run();
  }
  bool compiler = name == "clang++" || name == "clang" || name.starts_with("clang++-") || name.starts_with("clang-") ||
                  name == "g++" || name == "gcc" || name == "c++" || name == "cc";
  if (compiler) {
    // Not decomposed (yet): the compiler runs as it would, so a build using kcache as its
    // launcher for every language never breaks.
    LocalStats stats;
    stats.add("uncacheable.compiler " + name);
    stats.write();
    exec_compiler(args);
  }
  return std::nullopt;
}

}  // namespace kcache::launcher
