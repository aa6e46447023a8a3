// clang as the CUDA compiler, decomposed: its own plan (clang++ -###), its temporaries in the
// launch's folder. For each --cuda-gpu-arch, the device side is preprocessed here and compiled to
// PTX on the daemon (a clang step), then assembled by ptxas there; fatbinary (or
// llvm-offload-binary with -fgpu-rdc) runs here; the host side is preprocessed here and its
// object is a host entry keyed by that text, the device image it embeds and the options.
//
// clang names a compile's CUDA unit by a hash of its source path and whole command line (-cuid=,
// which names the unit's static device variables), output path and arch list included, so each
// build folder's work would differ. The launcher names the unit by its source's path alone (made
// relative to KCACHE_BASE_DIR where set), as clang allows (-cuid=): a second build folder, an
// arch dropped or a host-only edit keep each arch's device compile.
//
// Direct mode (direct.hpp), after the plan: a compile seen before is its host object, named by its
// manifest, with no preprocessor or step run.
#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <filesystem>
#include <set>
#include <span>

#include "launcher/launch.hpp"
#include "launcher/clang_plan.hpp"
#include "launcher/nvcc_plan.hpp"
#include "launcher/options.hpp"

namespace kcache::launcher {
namespace {

namespace fs = std::filesystem;

class ClangLaunch : public Launch {
 public:
  using Launch::Launch;

  // clang reads @FILE; its one rule for sources (options.hpp).
  std::optional<std::string> read_option_files() override { return expand_response_files(); }
  Invocation invocation() const override { return clang_invocation(m_args); }
  std::unique_ptr<Launch> for_source(std::vector<std::string> args) const override {
    return std::make_unique<ClangLaunch>(m_compiler, std::move(args));
  }
  std::vector<Task> tasks() override {
    std::vector<Task> list;
    int device_units = 0;
    for (const std::vector<std::string>& argv : m_commands) {
      if (is_host_compile(argv)) {
        // The host side's preprocessing reads only the source: it runs from the start, beside
        // the device side's work; its compile waits for the device image.
        list.push_back({[this, &argv](Printed& out) { return preprocess_host(argv, out); }, {}, false, {}});
        m_host_slot = list.size();
        list.push_back({[this, &argv](Printed& out) { return host_compile(argv, out); }, {}, true, {}});
        continue;
      }
      Task task;
      task.files = work_files(argv);
      int unit = is_device_compile(argv) ? ++device_units : 0;
      if (unit != 0) m_device_texts.push_back(device_text(unit));
      task.run = [this, &argv, unit](Printed& out) { return run_command(argv, unit, out); };
      list.push_back(std::move(task));
    }
    m_tasks = list.size();
    return list;
  }

 private:
  // @FILE: its words in its place, as clang reads them (a response file it cannot read: clang's).
  std::optional<std::string> expand_response_files() {
    std::vector<std::string> out;
    for (const std::string& a : m_args) {
      if (!a.starts_with("@")) {
        out.push_back(a);
        continue;
      }
      auto words = options_file_words(a.substr(1), "response file (clang)");
      if (!words) return words.error().message;
      out.insert(out.end(), words->begin(), words->end());
    }
    m_args = std::move(out);
    return std::nullopt;
  }

  // Direct mode (direct.hpp) names clang's compile by its command line and the programs its plan
  // runs, so the plan (clang -###, some 20 ms) is made first; a hit runs no preprocessor.
  bool answered_before_plan() override { return !plan() && direct_hit(); }
  const OptionTable* direct_table() const override { return &clang_options(); }
  // clang by its identity (its files), and each other program of its plan (ptxas, fatbinary,
  // llvm-offload-binary) and the libdevice it links by their digests.
  std::optional<std::string> direct_tools() override {
    auto clang = host_clang_identity(m_compiler);
    if (!clang) return std::nullopt;
    std::string out = "clang=" + to_hex(*clang) + '\n';
    std::set<std::string> named;
    for (const std::vector<std::string>& argv : m_commands) {
      std::vector<std::string> files;
      if (argv.size() < 2 || argv[1] != "-cc1") files.push_back(find_program(argv.front(), m_env));
      for (std::string& bitcode : linked_bitcode(argv)) files.push_back(std::move(bitcode));
      for (const std::string& f : files) {
        if (!named.insert(f).second) continue;
        auto digest = file_digest(f);
        if (!digest) return std::nullopt;
        out += basename_of(f) + '=' + to_hex(*digest) + '\n';
      }
    }
    return out;
  }
  // The compile's manifest entry (direct mode), naming its host object: the preprocessors' texts
  // list the files read; what every step but the host compile printed is kept with it (the
  // host compile's own messages come with its object).
  void after_plan() override {
    if (!m_host_request) return;
    std::vector<std::shared_ptr<const std::string>> texts;
    for (const std::string& f : m_device_texts) texts.push_back(text_of(f));
    texts.push_back(text_of(host_text()));
    std::vector<std::string_view> views;
    for (const auto& t : texts) views.push_back(*t);
    std::vector<std::size_t> slots;
    for (std::size_t i = 0; i < m_tasks; ++i) {
      if (i != m_host_slot) slots.push_back(i);
    }
    const std::string deps = work() + "kcache-dependencies.d";
    direct_record(*m_host_request, files_of_markers(views), printed_in(slots), fs::exists(deps) ? deps : std::string());
  }

  std::optional<std::string> plan() override {
    if (m_planned) return m_plan_reason;
    m_planned = true;
    m_plan_reason = make_plan();
    return m_plan_reason;
  }

  std::optional<std::string> make_plan() {
    if (!is_cuda_compile(m_args)) return "not CUDA (clang)";
    std::vector<std::string> dry = {m_compiler, "-###"};
    dry.insert(dry.end(), m_args.begin(), m_args.end());
    auto ran = dry_run(dry);
    if (!ran || ran->exit_code != 0) return "clang -### failed";
    ClangPlanOrReason read = read_clang_plan(ran->error_output);
    if (!read.plan) return read.reason;
    // One CUDA unit name for the same source whatever folder builds it (see the top of this file).
    name_the_unit(*read.plan, unit_path(read.plan->source));
    m_commands = std::move(read.plan->commands);
    m_driver.err = std::move(read.plan->driver_diagnostics);
    return std::nullopt;
  }

  // The source's path as the unit's name: its real path, relative to KCACHE_BASE_DIR where it lies
  // under it (as ccache's base_dir, so checkouts at different paths share).
  std::string unit_path(const std::string& source) const {
    std::error_code ec;
    fs::path real = fs::weakly_canonical(source, ec);
    if (ec) real = source;
    if (auto base = m_env.find("KCACHE_BASE_DIR"); base != m_env.end() && !base->second.empty()) {
      fs::path root = fs::weakly_canonical(base->second, ec);
      fs::path relative = real.lexically_relative(root);
      if (!ec && !relative.empty() && *relative.begin() != "..") return relative.string();
    }
    return real.string();
  }

  // Where a device compile's (numbered from 1) and the host side's preprocessed texts and the
  // object go in the work folder.
  std::string device_text(int unit) const { return work() + "device-" + std::to_string(unit) + ".cui"; }
  std::string host_text() const { return work() + "kcache-host.cui"; }
  std::string host_object_path() const { return work() + "kcache-object.o"; }

  // The bitcode files a cc1 line links (-mlink-builtin-bitcode: libdevice), in order.
  static std::vector<std::string> linked_bitcode(const std::vector<std::string>& argv) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "-mlink-builtin-bitcode") out.push_back(argv[i + 1]);
    }
    return out;
  }

  // What a cc1 line writes (-o), or "".
  static std::string output_of(const std::vector<std::string>& argv) {
    for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "-o") return argv[i + 1];
    }
    return {};
  }

  // One command of the plan; `unit` numbers the device compiles.
  bool run_command(const std::vector<std::string>& argv, int unit, Printed& out) {
    std::string program = basename_of(argv.front());
    if (program == "ptxas") return device_step(out, StepTool::ptxas, argv, device_identity(StepTool::ptxas, argv.front(), {}));
    if (argv.size() > 2 && argv[1] == "-cc1") return device_compile(argv, unit, out);
    return run_here(argv, &out);
  }

  // The host side's identity: clang's files (clang_compiler_identity) as the launcher hashes them.
  Expected<Digest> host_clang_identity(const std::string& program) {
    return clang_compiler_identity(find_program(program, m_env), file_digest);
  }

  // A cc1 line split in two (split_cc1), its dependency file staged where it names one.
  ClangSplit split(const std::vector<std::string>& argv, std::string_view action, const std::string& text, bool deps,
                   const std::string& output) {
    const std::string dependencies = work() + "kcache-dependencies.d";
    ClangSplit out = split_cc1(argv, action, text, deps, output, dependencies);
    if (!out.dependency_target.empty()) stage(dependencies, out.dependency_target);
    return out;
  }

  // One arch's device compile: preprocessed here, compiled on the daemon to PTX.
  bool device_compile(const std::vector<std::string>& argv, int unit, Printed& out) {
    std::string output = output_of(argv);
    ClangSplit s = split(argv, "-S", device_text(unit), false, output);
    if (!run_here(s.preprocess, &out)) return false;
    const std::vector<std::string> linked = linked_bitcode(s.compile);
    const std::string libdevice = linked.empty() ? std::string() : linked.back();
    std::map<std::string, std::string> renamed;
    if (basename_of(libdevice) == k_step_libdevice) renamed[libdevice] = std::string(k_step_libdevice);
    auto identity = device_identity(StepTool::clang, argv.front(), renamed.empty() ? std::string() : libdevice);
    return device_step(out, StepTool::clang, s.compile, identity, renamed, s.compile);
  }

  // The host side, preprocessed here (with the dependency file).
  bool preprocess_host(const std::vector<std::string>& argv, Printed& out) {
    m_host = split(argv, "-emit-obj", host_text(), true, host_object_path());
    return run_here(m_host.preprocess, &out);
  }

  // The host side's object, looked up by its preprocessed text, the device image it embeds and
  // the options; else compiled by the daemon from them (clang -cc1 of the same identity, in its
  // jail), or here where it cannot.
  bool host_compile(const std::vector<std::string>& argv, Printed& out) {
    std::string target = output_of(argv);
    if (target.empty()) return run_here(argv, &out);
    HostCompile host;
    host.object = host_object_path();
    const std::string text = host_text();
    const ClangSplit& s = m_host;
    host.compile = s.compile;
    // The text first: the work folder's name taken out of it (line markers), so that it names
    // no launch of its own.
    std::string bytes = without_work_folder(read_file(text));
    host.inputs.emplace_back("host.cui", sha256(bytes));
    host.contents.push_back(std::move(bytes));
    for (std::size_t i = 1; i < s.compile.size(); ++i) {
      std::string a = s.compile[i];
      if (a == "-o") {
        ++i;
        continue;
      }
      if (a == text) continue;  // the daemon names the text itself
      // The device image it embeds (-fcuda-include-gpubinary F, -fembed-offload-object=F).
      if (auto at = a.find(work()); at != std::string::npos) {
        std::string path = a.substr(at);
        std::string name = "f" + std::to_string(host.inputs.size()) + fs::path(path).extension().string();
        std::string image = read_file(path);
        if (image.empty()) return run_here(argv, &out);
        host.inputs.emplace_back(name, sha256(image));
        host.contents.push_back(std::move(image));
        a = a.substr(0, at) + name;
      }
      host.key_args.push_back(a);
    }
    stage(host.object, target);
    host.identity = host_clang_identity(argv.front());
    return host_object(out, host);
  }

  std::vector<std::vector<std::string>> m_commands;  // clang's plan, in order
  bool m_planned = false;                                  // plan() ran; its answer:
  std::optional<std::string> m_plan_reason;
  ClangSplit m_host;                                       // the host side's, once preprocessed
  std::vector<std::string> m_device_texts;                 // each device compile's preprocessed text
  std::size_t m_tasks = 0, m_host_slot = SIZE_MAX;        // the plan's tasks; the host compile's
};

}  // namespace

int launch_clang(const std::string& clang, const std::vector<std::string>& args) { return ClangLaunch(clang, args).run(); }

}  // namespace kcache::launcher
