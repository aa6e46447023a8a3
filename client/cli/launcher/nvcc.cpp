// nvcc, decomposed: its own plan (nvcc --dryrun), its temporaries in the launch's folder; the
// preprocessors, cudafe++ and fatbinary here, each arch's cicc and ptxas as device steps, the
// host compile's object as a host entry keyed by what the host compiler actually compiles.
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <span>

#include "kcache/headers_digest.hpp"
#include "launcher/launcher.hpp"
#include "launcher/direct_key.hpp"
#include "launcher/launch.hpp"
#include "launcher/nvcc_plan.hpp"
#include "launcher/options.hpp"

namespace kcache::launcher {
namespace {

namespace fs = std::filesystem;

class NvccLaunch : public Launch {
 public:
  using Launch::Launch;

  // nvcc reads --options-file; its one rule for sources (options.hpp).
  std::optional<std::string> read_option_files() override { return expand_options_files(); }
  Invocation invocation() const override { return nvcc_invocation(m_args); }
  std::unique_ptr<Launch> for_source(std::vector<std::string> args) const override {
    return std::make_unique<NvccLaunch>(m_compiler, std::move(args));
  }
  std::vector<Task> tasks() override {
    std::vector<Task> list = plan_tasks();
    for (const Task& t : list) m_all_slots.push_back(t.slot.value_or(m_all_slots.size()));
    return list;
  }
  // The whole compile's object, when it missed, offered with what the skipped steps printed.
  // Then this command line's manifest gains the compile (direct mode), naming that object. A device
  // link's object, which its plan wrote in place, is offered (or kept here) likewise.
  void after_plan() override {
    if (m_device_link_request) {
      const std::string target = object_path(nvcc_options(), m_args);
      Printed printed = m_driver, steps = printed_in(m_all_slots);
      printed.add(steps.out, steps.err);
      if (fs::exists(target)) offer_object(*m_device_link_request, StepTool::nvcc, target, printed.out, printed.err, "device_link");
      return;
    }
    if (!m_whole_request) return;
    if (!m_whole_hit) {
      if (!fs::exists(object_file())) return;
      Printed past = printed_in(m_past_preprocessors);
      offer_object(*m_whole_request, StepTool::nvcc, object_file(), past.out, past.err);
    }
    const std::string deps = work() + "kcache-dependencies.d";
    direct_record(*m_whole_request, files_read(), printed_in(m_preprocessor_slots), fs::exists(deps) ? deps : std::string());
  }

  // A device link (nvcc -dlink) answered from its inputs' bytes (device_link_name), before any
  // plan. Found in this machine's objects or the daemon's, it is the object; else the plan runs
  // (each nvlink a step of its own) and its object is offered.
  bool answered_before_plan() override {
    if (!m_device_link) return direct_hit();
    m_device_link_request = device_link_request();
    if (!m_device_link_request) return false;
    const std::string object = object_file();
    Printed printed;
    bool hit = take_local_object(printed, *m_device_link_request, StepTool::nvcc, object, "device_link");
    if (!hit) {
      auto found = ask_daemon(*m_device_link_request, StepTool::nvcc);
      hit = holds_object(found) && take_object(printed, *found, StepTool::nvcc, object, "device_link");
      if (hit) keep_a_copy(*m_device_link_request, *found);
    }
    if (!hit) return false;
    stage(object, object_path(nvcc_options(), m_args));
    add_printed(std::move(printed));
    return true;
  }

  std::optional<v1::StepRequest> device_link_request() {
    auto name = device_link_name(m_compiler, m_env, m_args);
    if (!name) return std::nullopt;
    return object_request(*name);
  }

  // Direct mode: nvcc's options, and its tools by their files' digests (kept by file identity:
  // a stat each): nvcc and its profile, cudafe++, fatbinary, ptxas, cicc and libdevice of its
  // toolkit, and the host compiler it runs (-ccbin, NVCC_CCBIN, else gcc) by its identity.
  const OptionTable* direct_table() const override { return &nvcc_options(); }
  std::optional<std::string> direct_tools() override { return nvcc_tools(m_compiler, m_env, m_args); }


 private:
  // The plan's steps as tasks. Where the whole compile can be named (whole_compile_target), the
  // preprocessors run first; then the whole compile's object is looked up, and a hit skips every
  // step after them but the dependency file. What each step prints keeps its place in the plan
  // (on a hit, the steps past the preprocessors print theirs after all of the preprocessors').
  std::vector<Task> plan_tasks() {
    const bool whole = !m_whole_target.empty();
    std::vector<Task> first, past;
    for (std::size_t i = 0; i < m_steps.size(); ++i) {
      const PlanStep& step = m_steps[i];
      Task task;
      task.slot = i;
      task.barrier = step.kind != PlanStep::Kind::run || is_host_compile(step.argv, work());
      switch (step.kind) {
        case PlanStep::Kind::assign:
          task.run = [this, &step](Printed&) { return m_env[step.name] = step.value, true; };
          break;
        case PlanStep::Kind::remove:
          task.run = [this, &step](Printed&) {
            for (const std::string& f : step.argv) {
              std::error_code ec;
              if (f.starts_with(work())) fs::remove(f, ec);  // nvcc's temporaries; never a file of the build's
            }
            return true;
          };
          break;
        case PlanStep::Kind::filter_deps:
          task.run = [this, &step](Printed&) { return write_dependencies(step.target); };
          break;
        case PlanStep::Kind::run:
          task.files = work_files(step.argv);
          task.run = [this, &step](Printed& out) { return run_step(step.argv, out); };
          if (is_host_compiler(basename_of(step.argv.front()))) remember_preprocessed(step.argv);
          break;
      }
      if (whole && (step.kind == PlanStep::Kind::assign || is_preprocessor(step))) {
        m_preprocessor_slots.push_back(i);
        first.push_back(std::move(task));
        continue;
      }
      if (whole && step.kind != PlanStep::Kind::filter_deps) {
        task.run = [this, run = std::move(task.run)](Printed& out) { return m_whole_hit || run(out); };
      }
      m_past_preprocessors.push_back(i);
      past.push_back(std::move(task));
    }
    if (!whole) return past;
    Task look;
    look.barrier = true;  // after every preprocessor, before every other step
    // A hit prints what the steps past the preprocessors printed after what this run's
    // preprocessors print (their warnings come from the source, which their texts do not hold).
    look.slot = m_steps.size();
    look.run = [this](Printed& out) { return look_up_whole_compile(out), true; };
    first.push_back(std::move(look));
    first.insert(first.end(), std::make_move_iterator(past.begin()), std::make_move_iterator(past.end()));
    return first;
  }

  // The object the host compile writes in the work folder (host_step), or a whole compile's hit.
  std::string object_file() const { return work() + "kcache-object.o"; }

  // nvcc's whole compile past its preprocessors, named by what can change its object: the
  // preprocessed texts; the plan's steps as they run (the work folder and the object's place left
  // out); and each program of the plan (cicc with libdevice, ptxas, cudafe++, fatbinary, the host
  // compiler) with the toolkit's headers, of which the host compile reads crt/host_runtime.h
  // beyond those texts. A hit stages its object and skips the rest; a miss is offered after it.
  void look_up_whole_compile(Printed& out) {
    // The launcher's own version of how it runs a plan: an object a launcher with a bug made
    // (before -lineinfo's folder and stamps were named, say) is never found by a fixed one.
    std::string plan = "kcache-launcher-plan 2\n";
    const std::string& target = m_whole_target;
    std::vector<Digest> programs;
    std::vector<std::string> seen;
    for (const PlanStep& step : m_steps) {
      if (step.kind != PlanStep::Kind::run) continue;
      const std::string& program = step.argv.front();
      plan += basename_of(program);
      for (std::size_t i = 1; i < step.argv.size(); ++i) {
        plan += '\0' + without_work_folder(step.argv[i - 1] == "-o" && step.argv[i] == target ? "object" : step.argv[i]);
      }
      plan += '\n';
      if (std::find(seen.begin(), seen.end(), program) != seen.end()) continue;
      seen.push_back(program);
      std::string name = basename_of(program);
      Expected<Digest> identity = name == "cicc"                ? cicc_identity(program)
                                  : name == "ptxas"             ? program_identity(program)
                                  : is_host_compiler(name)      ? host_compiler_identity(program, "cc1plus")
                                                                : file_digest(find_program(program, m_env));
      if (!identity) return;  // a program the key cannot name: every step runs as before
      programs.push_back(*identity);
    }
    // Debug line information names the build's folder (cicc_step): the object is that folder's.
    const bool line_info = std::any_of(m_steps.begin(), m_steps.end(), [](const PlanStep& step) {
      return step.kind == PlanStep::Kind::run && basename_of(step.argv.front()) == "cicc" && asks_line_info(step.argv);
    });
    if (line_info) {
      // ... and each file's modification time and size, which ptxas puts in the line table.
      plan += std::string("folder") + '\0' + cicc_folder() + "\n";
      for (const std::string& name : files_read()) {
        struct stat st {};
        if (::stat(name.c_str(), &st) != 0) continue;
        plan += std::string("stamp") + '\0' + name + '\0' + std::to_string(st.st_mtim.tv_sec) + '\0' +
                std::to_string(st.st_size) + "\n";
      }
    }
    auto top = m_env.find("TOP");  // the toolkit nvcc's plan names
    if (top == m_env.end()) return;
    programs.push_back(sha256(cuda_headers_digest({fs::path(top->second) / "include"})));
    std::vector<std::pair<std::string, Digest>> inputs = {{"plan", sha256(plan)}};
    for (const std::string& file : m_preprocessed) {
      inputs.emplace_back("f" + std::to_string(inputs.size() - 1) + ".ii", text_digest(file));
    }
    m_whole_request = object_request({StepTool::nvcc, step_tool_identity(StepTool::nvcc, programs), {}, inputs});
    const v1::StepRequest& request = *m_whole_request;
    // This machine's own, else the daemon's; where neither has it (or the daemon is down or
    // refuses), every step runs as before, and the object is offered or kept here after.
    bool hit = take_local_object(out, request, StepTool::nvcc, object_file());
    if (!hit) {
      auto found = ask_daemon(request, StepTool::nvcc);
      hit = holds_object(found) && take_object(out, *found, StepTool::nvcc, object_file());
    }
    if (hit) {
      stage(object_file(), target);
      m_whole_hit = true;
    }
  }

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
      auto words = options_file_words(file, "options file");
      if (!words) return words.error().message;
      out.insert(out.end(), words->begin(), words->end());
    }
    m_args = std::move(out);
    return std::nullopt;
  }

  // nvcc's plan, with its temporaries in the work folder; the reason when the launcher cannot run it.
  std::optional<std::string> plan() override {
    std::vector<std::string> dry = {m_compiler, "--dryrun"};
    dry.insert(dry.end(), m_args.begin(), m_args.end());
    auto ran = dry_run(dry);
    if (!ran || ran->exit_code != 0) return "nvcc --dryrun failed";
    // nvcc's own messages (nvcc warning : ...), which it prints before any step's.
    for (std::size_t at = 0; at < ran->error_output.size();) {
      std::size_t end = std::min(ran->error_output.find('\n', at), ran->error_output.size());
      std::string_view line(ran->error_output.data() + at, end - at);
      at = end + 1;
      if (!line.starts_with("#$ ")) m_driver.err += std::string(line) + "\n";
    }
    std::map<std::string, std::string> vars = m_env;
    auto steps = parse_plan(ran->error_output, vars);
    if (!steps) return "plan syntax";
    m_steps = std::move(*steps);
    for (PlanStep& step : m_steps) {
      for (std::string& w : step.argv) w = fixed_temporary_names(std::move(w));
      step.target = fixed_temporary_names(std::move(step.target));
    }
    if (auto refused = plan_refusal(m_steps, work())) return refused;
    m_whole_target = whole_compile_target(m_steps, work());
    return std::nullopt;
  }

  bool run_step(const std::vector<std::string>& argv, Printed& out) {
    std::string program = basename_of(argv.front());
    if (program == "cicc") return cicc_step(argv, out);
    if (program == "cudafe++") return cudafe_step(argv, out);
    if (program == "ptxas") return ptxas_step(argv, out);
    if (program == "nvlink") return nvlink_step(argv, out);
    if (is_host_compiler(program) && is_host_compile(argv, work())) return host_step(argv, out);
    return run_here(argv, &out);
  }

  // cicc, on the daemon. With debug line information, its input's relative line markers are
  // joined to the build's folder first (cicc joins them to its own: the daemon's step folder), and
  // its other outputs (the stub the host compile includes) get them back as nvcc's has them. Under
  // -G its debug information also names its own folder (DW_AT_comp_dir), which no argument
  // moves: it runs here, in the build's folder, as the plan says.
  bool cicc_step(const std::vector<std::string>& argv, Printed& out) {
    if (std::find(argv.begin(), argv.end(), "--debug_mode") != argv.end()) {
      m_stats.add("cicc.local");
      return run_here(argv, &out);
    }
    if (!asks_line_info(argv)) return device_step(out, StepTool::cicc, argv, cicc_identity(argv.front()));
    const std::string folder = cicc_folder();
    std::vector<std::string> joined;
    std::vector<std::string> outputs;
    for (std::size_t i = 1; i < argv.size(); ++i) {
      const std::string& a = argv[i];
      if (!a.starts_with(work())) continue;
      if (a.ends_with(".cpp1.ii")) {
        if (!rewrite_text(a, absolute_line_markers(*text_of(a), folder, joined))) return false;
      } else if (argv[i - 1] != "-o" && argv[i - 1] != "--module_id_file_name") {
        outputs.push_back(a);  // the stub, cudafe1.c and cudafe1.gpu
      }
    }
    if (!device_step(out, StepTool::cicc, argv, cicc_identity(argv.front()))) return false;
    for (const std::string& file : outputs) {
      std::error_code ec;
      if (fs::exists(file, ec) && !rewrite_text(file, relative_line_markers(*text_of(file), folder, joined))) return false;
    }
    return true;
  }

  // ptxas, on the daemon: with debug line information, its PTX names the build's files, whose
  // modification time and size ptxas would read where it runs; they are written into a copy of
  // the PTX it assembles (stamped_file_directives), as nvcc's ptxas would find them. (That copy
  // gives nvcc's cubin only where ptxas keeps no PTX text in it: see below.)
  bool ptxas_step(const std::vector<std::string>& argv, Printed& out) {
    std::vector<std::string> stamped = argv;
    for (std::string& a : stamped) {
      if (!a.starts_with(work()) || !a.ends_with(".ptx")) continue;
      std::string ptx = read_file(a);
      if (ptx.find(".file") == std::string::npos) continue;
      std::string text = stamped_file_directives(ptx, [](const std::string& name) -> std::optional<FileStamp> {
        struct stat st {};
        if (name.empty() || name.front() != '/' || ::stat(name.c_str(), &st) != 0) return std::nullopt;
        return FileStamp{static_cast<long long>(st.st_mtim.tv_sec), static_cast<long long>(st.st_size)};
      });
      if (text == ptx) continue;
      // Relocatable code (--compile-only) keeps the PTX's own text in the cubin, named by its
      // hash, so the stamps cannot be written in: ptxas runs here, where it finds the files.
      if (std::find(argv.begin(), argv.end(), "--compile-only") != argv.end()) {
        m_stats.add("ptxas.local");
        return run_here(argv, &out);
      }
      std::string copy = a.substr(0, a.size() - 4) + ".stamped.ptx";
      if (!write_file(copy, text)) return false;
      a = copy;
    }
    return device_step(out, StepTool::ptxas, stamped, program_identity(argv.front()));
  }

  // nvlink (a device link), on the daemon, as plan_nvlink writes its line: the objects and
  // archives it links are linked into the work folder by name (device_step sends them).
  bool nvlink_step(const std::vector<std::string>& argv, Printed& out) {
    NvlinkStep step = plan_nvlink(argv, work(), [](const std::string& path) {
      std::error_code ec;
      return fs::is_regular_file(path, ec);
    });
    if (!step.refusal.empty()) {
      m_stats.add("nvlink.local");
      return run_here(argv, &out);
    }
    // Each arch's nvlink links the same files under the same names: made by the first.
    bool linked = true;
    {
      std::lock_guard lock(m_nvlink_inputs_mutex);
      for (const auto& [from, to] : step.inputs) {
        std::error_code ec;
        const fs::path target = fs::absolute(from, ec);
        if (fs::read_symlink(to, ec) == target) continue;
        fs::create_symlink(target, to, ec);
        linked = linked && !ec;
      }
    }
    if (!linked) {
      m_stats.add("nvlink.local");
      return run_here(argv, &out);
    }
    return device_step(out, StepTool::nvlink, step.argv, device_identity(StepTool::nvlink, argv.front(), step.cudadevrt), {},
                       argv);
  }

  // cudafe++, here. Where it names the unit's module ID by its time and process ID
  // (stable_module_id), the ID is made from the unit's inputs instead, and cudafe++ runs again
  // reading it: two compiles of the unit give the same object, and its device steps are shared.
  bool cudafe_step(const std::vector<std::string>& argv, Printed& out) {
    if (!run_here(argv, &out)) return false;
    auto generate = std::find(argv.begin(), argv.end(), "--gen_module_id_file");
    auto file = std::find(argv.begin(), argv.end(), "--module_id_file_name");
    if (generate == argv.end() || file == argv.end() || file + 1 == argv.end()) return true;
    std::string unit;
    for (const std::string& a : argv) {
      std::string word = a.starts_with(work()) ? a.substr(work().size()) : a;
      unit += word + '\0';
    }
    // The device side's texts, not the host's: a host-only edit keeps the ID, and so every
    // device step of the unit.
    for (const std::string& path : m_device_texts) unit += to_hex(text_digest(path)) + '\0';
    auto id = stable_module_id(read_file(*(file + 1)), unit);
    if (!id) return true;
    m_stats.add("launcher.module_id_made");
    if (!write_file(*(file + 1), *id)) return false;
    std::vector<std::string> again(argv.begin(), generate);
    again.insert(again.end(), generate + 1, argv.end());
    return run_here(again, nullptr);  // it printed its messages the first time
  }

  Expected<Digest> program_identity(const std::string& program) { return device_identity(StepTool::ptxas, program, {}); }
  // cicc's program and the libdevice it reads from the plan's NVVMIR_LIBRARY_DIR.
  Expected<Digest> cicc_identity(const std::string& program) {
    auto dir = m_env.find("NVVMIR_LIBRARY_DIR");
    if (dir == m_env.end()) return make_error(ErrorCode::k_not_found, "no NVVMIR_LIBRARY_DIR");
    return device_identity(StepTool::cicc, program, dir->second + "/libdevice.10.bc");
  }

  // A preprocessor run whose output the dependency filter reads (in plan order).
  void remember_preprocessed(const std::vector<std::string>& argv) {
    if (std::find(argv.begin(), argv.end(), "-E") == argv.end()) return;
    const bool device = std::any_of(argv.begin(), argv.end(), [](const std::string& a) { return a.starts_with("-D__CUDA_ARCH__="); });
    for (std::size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] != "-o") continue;
      m_preprocessed.push_back(argv[i + 1]);
      if (device) m_device_texts.push_back(argv[i + 1]);
    }
  }

  // The files the preprocessors read, from their texts' line markers (files_of_markers), once:
  // the dependency file, the whole compile's stamps and the manifest list them.
  const std::vector<std::string>& files_read() {
    std::lock_guard lock(m_files_read_mutex);
    if (!m_files_read) {
      std::vector<std::shared_ptr<const std::string>> texts;
      for (const std::string& f : m_preprocessed) texts.push_back(text_of(f));
      std::vector<std::string_view> views;
      for (const auto& t : texts) views.push_back(*t);
      m_files_read = files_of_markers(views);
    }
    return *m_files_read;
  }

  bool write_dependencies(const std::string& target) {
    DependencyOptions deps = dependency_options(nvcc_options(), m_args);
    if (deps.target.empty()) deps.target = object_path(nvcc_options(), m_args);
    std::string staged = work() + "kcache-dependencies.d";
    if (!write_file(staged, dependency_file(deps.target, files_read(), deps.phony))) return false;
    stage(staged, target);
    return true;
  }

  // The host compile of cudafe++'s output: its object looked up by what the host compiler
  // actually compiles (the preprocessed translation unit, fatbinary included), else compiled by the
  // daemon from that text, or here (and offered: kept for others only from a publish client).
  //
  // GCC preprocesses with -fdirectives-only (includes and conditionals done, macros left for the
  // compile), which it compiles with -fpreprocessed -fdirectives-only into the very bytes the
  // whole compile makes, under the input's own name (its FILE symbol). Other host compilers
  // preprocess fully, and their objects are made here.
  bool host_step(const std::vector<std::string>& argv, Printed& out) {
    const std::string& prefix = work();
    HostSplit split = split_host_compile(argv, prefix, prefix + "kcache-object.o", prefix + "kcache-host.ii");
    HostCompile host;
    host.compile = split.compile;
    host.object = prefix + "kcache-object.o";
    host.key_args = split.key_args;
    const std::vector<std::string> preprocess = split.preprocess;
    const std::string input_name = split.input_name;
    const std::string target = split.target;
    const bool gcc = split.gcc, debug = split.debug;
    if (target.empty()) return run_here(argv, &out);
    stage(host.object, target);
    if (debug) {
      m_stats.add("host.local");
      return run_here(host.compile, &out);
    }
    host.prepare = [this, preprocess, prefix, gcc, input_name](HostCompile& h) {
      ProcessResult preprocessed;
      if (!run_here(preprocess, nullptr, {}, &preprocessed)) return false;  // its warnings: the compile's
      std::string text = without_work_folder(read_file(prefix + "kcache-host.ii"));
      // Macros are left for the compile: the time of day would not be in the text, so a unit
      // that asks for it has no entry (the compile runs here, each time).
      if (gcc && (text.find("__DATE__") != std::string::npos || text.find("__TIME__") != std::string::npos ||
                  text.find("__TIMESTAMP__") != std::string::npos)) {
        h.identity = make_error(ErrorCode::k_unimplemented, "the unit reads the time of its compile");
        return true;
      }
      h.inputs.emplace_back(input_name, sha256(text));
      if (gcc) h.contents = {std::move(text)};
      return true;
    };
    host.identity = host_compiler_identity(argv.front(), "cc1plus");
    return host_object(out, host);
  }

  std::vector<PlanStep> m_steps;
  std::string m_whole_target;  // whole_compile_target() of the plan, once it is made
  std::vector<std::string> m_preprocessed;  // outputs of the plan's -E runs, in order
  std::vector<std::string> m_device_texts;  // those of the device side (-D__CUDA_ARCH__=)
  std::vector<std::size_t> m_past_preprocessors;  // the steps a whole compile's hit skips, by index
  std::optional<v1::StepRequest> m_whole_request;  // the whole compile's look-up, hit or missed
  std::vector<std::size_t> m_preprocessor_slots;  // the tasks a whole compile's hit runs (before its look-up)
  bool m_whole_hit = false;
  std::mutex m_nvlink_inputs_mutex;  // nvlink_step's links into the work folder
  std::optional<v1::StepRequest> m_device_link_request;  // a device link's object, by its inputs' bytes
  std::vector<std::size_t> m_all_slots;  // every task's slot, in plan order
  std::mutex m_files_read_mutex;
  std::optional<std::vector<std::string>> m_files_read;  // files_read(), once made
};

}  // namespace

int launch_nvcc(const std::string& nvcc, const std::vector<std::string>& args) { return NvccLaunch(nvcc, args).run(); }

}  // namespace kcache::launcher
