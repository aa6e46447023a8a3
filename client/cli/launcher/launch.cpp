#include "launcher/launch.hpp"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <thread>

#include "endpoint.hpp"
#include "kcache/files.hpp"
#include "kcache/search_path.hpp"
#include "launcher/direct.hpp"
#include "launcher/direct_key.hpp"
#include "launcher/local_objects.hpp"
#include "launcher/nvcc_plan.hpp"
#include "wire/wire.hpp"

namespace kcache::launcher {

namespace fs = std::filesystem;

std::string basename_of(std::string_view path) {
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

std::string find_program(const std::string& name, const std::map<std::string, std::string>& env) {
  auto it = env.find("PATH");
  return search_path(name, it == env.end() ? k_default_path : std::string_view(it->second));
}

std::string read_file(const std::string& path) { return read_whole_file(path); }

bool write_file(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

namespace {

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

}  // namespace

Launch::Launch(std::string compiler, std::vector<std::string> args)
    : m_compiler(std::move(compiler)), m_args(std::move(args)) {
  const fs::path temp = fs::temp_directory_path();
  // A launch killed part-way (SIGKILL, or Ctrl-C: no destructor runs) leaves its folder, with
  // nvcc's preprocessed files in it (megabytes); the launches after it remove such folders.
  remove_folders_of_dead_processes(temp, k_work_folder_prefix, k_abandoned_work_folder_age);
  std::string pattern = (temp / (std::string(k_work_folder_prefix) + std::to_string(::getpid()) + "-XXXXXX")).string();
  if (::mkdtemp(pattern.data()) != nullptr) m_work_prefix = pattern + "/";
  m_env = this_environment();
}

int Launch::run() {
  std::vector<std::string> real = {m_compiler};
  real.insert(real.end(), m_args.begin(), m_args.end());
  if (auto reason = read_option_files()) return unchanged(real, *reason);
  Invocation sources = invocation();
  m_device_link = sources.device_link;
  if (!sources.unchanged.empty()) return unchanged(real, sources.unchanged);
  if (sources.per_source.size() > 1) {
    // Each source its own compile and object, in order, as the compiler compiles them; the first
    // that fails ends the build with the compiler's own messages and exit code.
    m_stats.add("launcher.several_sources");
    for (std::size_t i = 0; i < sources.per_source.size(); ++i) {
      std::unique_ptr<Launch> one = for_source(std::move(sources.per_source[i]));
      one->m_later_source = i > 0;
      if (int code = one->run(); code != 0) return code;
    }
    return 0;
  }
  if (work().empty()) return unchanged(real, "no temporary folder");
  if (answered_before_plan()) {
    m_stats.add(m_device_link ? "launcher.device_links" : "launcher.compiles");
    return finish();
  }
  if (auto reason = plan()) return unchanged(real, *reason);
  m_stats.add(m_device_link ? "launcher.device_links" : "launcher.compiles");
  if (!run_plan(tasks())) {
    // A failed step: the compiler itself says what failed, with its exit code, and nothing is kept.
    m_stats.add("launcher.failed");
    return run_unchanged(real);
  }
  after_plan();
  return finish();
}

Launch::~Launch() {
  std::error_code ec;
  if (!m_work_prefix.empty()) fs::remove_all(m_work_prefix, ec);
}

std::string Launch::without_work_folder(std::string text) const {
  if (m_work_prefix.empty()) return text;
  for (std::size_t at = text.find(m_work_prefix); at != std::string::npos; at = text.find(m_work_prefix, at)) {
    text.erase(at, m_work_prefix.size());
  }
  return text;
}

std::shared_ptr<const std::string> Launch::text_of(const std::string& path) {
  struct stat st {};
  const bool there = ::stat(path.c_str(), &st) == 0;
  const std::int64_t mtime = st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec;
  std::lock_guard lock(m_texts_mutex);
  Text& text = m_texts[path];
  if (!text.bytes || !there || text.bytes->size() != static_cast<std::size_t>(st.st_size) || text.mtime_ns != mtime) {
    text = Text{std::make_shared<const std::string>(read_file(path)), mtime, std::nullopt};
  }
  return text.bytes;
}

bool Launch::rewrite_text(const std::string& path, std::string bytes) {
  std::lock_guard lock(m_texts_mutex);
  m_texts.erase(path);
  return write_file(path, bytes);
}

Digest Launch::text_digest(const std::string& path) {
  auto bytes = text_of(path);
  {
    std::lock_guard lock(m_texts_mutex);
    auto it = m_texts.find(path);
    if (it != m_texts.end() && it->second.bytes == bytes && it->second.digest) return *it->second.digest;
  }
  // The work folder's name is rare in a text (line markers of cudafe++'s outputs): hashed as read
  // where it is absent, with no copy.
  Digest digest = bytes->find(m_work_prefix) == std::string::npos || m_work_prefix.empty() ? sha256(*bytes)
                                                                                          : sha256(without_work_folder(*bytes));
  std::lock_guard lock(m_texts_mutex);
  auto it = m_texts.find(path);
  if (it != m_texts.end() && it->second.bytes == bytes) it->second.digest = digest;
  return digest;
}

std::vector<std::string> Launch::env_list() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : m_env) out.push_back(k + "=" + v);
  return out;
}

Expected<ProcessResult> Launch::dry_run(const std::vector<std::string>& argv) {
  m_env["TMPDIR"] = work().substr(0, work().size() - 1);
  std::vector<std::string> env = env_list();
  ProcessOptions options;
  options.output = ProcessOptions::Output::separate;
  options.env = &env;
  options.search_path = true;
  return run_process(argv, options);
}

Expected<std::vector<std::string>> Launch::options_file_words(const std::string& path, const std::string& what) {
  std::ifstream in(path);
  if (!in) return make_error(ErrorCode::k_not_found, what + " unreadable");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  auto words = shell_words(text, {});
  if (!words) return make_error(ErrorCode::k_invalid_argument, what + " syntax");
  return words;
}

bool Launch::run_here(const std::vector<std::string>& argv, Printed* out, const std::string& cwd, ProcessResult* result) {
  std::vector<std::string> env = env_list();
  ProcessOptions options;
  options.output = ProcessOptions::Output::separate;
  options.env = &env;
  options.search_path = true;
  options.cwd = cwd;
  auto ran = run_process(argv, options);
  if (!ran) return false;
  if (ran->exit_code != 0 || ran->signal != 0) return false;
  if (out) out->add(ran->output, ran->error_output);
  if (result) *result = std::move(*ran);
  return true;
}

bool Launch::run_plan(const std::vector<Task>& tasks) {
  // At least 4 at a time: a device step mostly waits for the daemon.
  return launcher::run_plan(tasks, m_printed, std::clamp<std::size_t>(std::thread::hardware_concurrency(), 4, 16));
}

Printed Launch::printed_in(const std::vector<std::size_t>& slots) const {
  Printed out;
  for (std::size_t s : slots) {
    if (s < m_printed.size()) out.add(m_printed[s].out, m_printed[s].err);
  }
  return out;
}

kcache::Client* Launch::client() {
  std::lock_guard lock(m_mutex);
  if (!m_client && !m_daemon_down) {
    ClientOptions options(resolve_server(""), std::chrono::minutes(10));
    if (auto token = resolve_token(""); token) options.token = *token;
    options.max_attempts = 1;
    m_client.emplace(options);
  }
  return m_daemon_down ? nullptr : &*m_client;
}

std::optional<v1::StepResponse> Launch::ask_daemon(const v1::StepRequest& request, StepTool tool) {
  kcache::Client* c = client();
  if (c == nullptr) return std::nullopt;
  auto answer = c->step(request);
  // A full queue says "retry after a short backoff": a build's many steps at once (each arch of
  // each file of ninja's jobs) outnumber the daemon's queue for a moment. Asked again for up to
  // 5 s before the step runs here (counted as busy), which would load the same cores or others.
  auto busy = [&] {
    return !answer && answer.error().code == ErrorCode::k_resource_exhausted &&
           answer.error().message.find("queue is full") != std::string::npos;  // not a size limit
  };
  auto backoff = std::chrono::milliseconds(50);
  for (auto waited = std::chrono::milliseconds(0); busy() && waited < std::chrono::seconds(5);
       waited += backoff, backoff = std::min(backoff * 2, std::chrono::milliseconds(800))) {
    std::this_thread::sleep_for(backoff);
    answer = c->step(request);
  }
  if (answer) return *answer;
  if (busy()) {
    m_stats.add("launcher.busy." + std::string(step_tool_name(tool)));
    return std::nullopt;
  }
  if (answer.error().code == ErrorCode::k_unavailable || answer.error().code == ErrorCode::k_deadline_exceeded) {
    // No later step waits for it again; counted once per compile, though steps running at once
    // may each have found it down.
    if (!m_daemon_down.exchange(true)) m_stats.add("launcher.daemon_unreachable");
  } else {
    m_stats.add("launcher.refused." + std::string(step_tool_name(tool)));
    if (std::getenv("KCACHE_LAUNCHER_DEBUG")) std::fprintf(stderr, "kcache: %s\n", answer.error().message.c_str());
  }
  return std::nullopt;
}

bool Launch::device_step(Printed& out, StepTool tool, const std::vector<std::string>& argv, const Expected<Digest>& identity,
                         const std::map<std::string, std::string>& renamed, const std::vector<std::string>& local) {
  const std::string tool_name(step_tool_name(tool));
  StepSpec spec;
  spec.tool = tool;
  std::vector<std::pair<std::string, std::string>> files;  // (name in the step, path in the plan)
  for (std::size_t i = 1; i < argv.size(); ++i) {
    std::string arg = argv[i];
    if (auto r = renamed.find(arg); r != renamed.end()) {
      arg = r->second;
    } else if (!work().empty() && arg.starts_with(work())) {
      auto known = std::find_if(files.begin(), files.end(), [&](const auto& f) { return f.second == arg; });
      if (known == files.end()) {
        std::string name = "f" + std::to_string(files.size()) + fs::path(arg).extension().string();
        // What an output option names is an output, even where an earlier step wrote it (each
        // arch's nvlink writes the one registration file); else a file that is there is an input.
        std::error_code ec;
        const bool written = argv[i - 1] == "-o" || argv[i - 1] == "--register-link-binaries";
        (!written && fs::exists(arg, ec) ? spec.inputs : spec.outputs).push_back(name);
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
    m_device_missed = true;
    m_stats.add(tool_name + ".local");
    if (!local.empty()) return run_here(local, &out);
    fs::path folder = work() + "step-" + std::to_string(++m_local_steps);
    std::error_code ec;
    fs::create_directory(folder, ec);
    for (const std::string& name : spec.inputs) fs::copy_file(path_of(name), folder / name, ec);
    std::vector<std::string> here = {argv.front()};
    here.insert(here.end(), spec.args.begin(), spec.args.end());
    if (!run_here(here, &out, folder.string())) return false;
    for (const std::string& name : spec.outputs) {
      fs::rename(folder / name, path_of(name), ec);
      if (ec) return false;
    }
    return true;
  };
  if (!check_step(spec) || !identity) return run_locally();
  spec.tool_digest = *identity;
  std::vector<std::string> contents;
  for (const std::string& name : spec.inputs) {
    contents.push_back(*text_of(path_of(name)));
    // Text the daemon would refuse to compile (kcache/step.hpp) is compiled here instead.
    if (!check_step_input(tool, name, contents.back())) return run_locally();
  }
  std::optional<v1::StepResponse> answer;
  if (tool == StepTool::nvlink) {
    // A device link's objects and archives are large: looked up by their digests first, sent
    // only when the daemon has no entry.
    std::vector<Digest> digests;
    for (const std::string& c : contents) digests.push_back(sha256(c));
    answer = ask_daemon(wire::step_request(spec, {}, digests), tool);
    if (!answer) return run_locally();
    if (answer->exit_code() == 0 && answer->outputs_size() == 0) answer.reset();
  }
  if (!answer) answer = ask_daemon(wire::step_request(spec, contents), tool);
  if (!answer) return run_locally();
  if (answer->exit_code() != 0) return false;  // the real compiler reruns and reports it
  for (const v1::StepFile& f : answer->outputs()) {
    std::string path = path_of(f.name());
    if (path.empty() || !rewrite_text(path, f.content())) return false;
  }
  out.add(answer->stdout_text(), answer->stderr_text());
  if (answer->outcome() == v1::OUTCOME_MISS) m_device_missed = true;
  m_stats.add(tool_name + (answer->outcome() == v1::OUTCOME_MISS ? ".miss" : ".hit"));
  return true;
}

Expected<Digest> Launch::host_compiler_identity(const std::string& program, const std::string& proper) {
  return host_driver_identity(find_program(program, m_env), proper);
}

bool Launch::host_object(Printed& out, HostCompile& host) {
  // The compile, started early (a device step missed) or when the look-up found nothing.
  std::optional<std::thread> early;
  bool early_ok = false;
  ProcessResult compiled;
  if (m_device_missed && client() == nullptr) early.emplace([&] { early_ok = run_here(host.compile, nullptr, {}, &compiled); });
  auto compile_here = [&]() {
    if (!early) early_ok = run_here(host.compile, nullptr, {}, &compiled);
    if (early) early->join(), early.reset();
    if (early_ok) out.add(compiled.output, compiled.error_output);
    return early_ok;
  };
  if (host.prepare && !host.prepare(host)) {
    if (early) early->join();
    return false;
  }
  if (!host.identity) {
    m_stats.add("host.local");
    return compile_here();
  }
  v1::StepRequest request = object_request({StepTool::host, *host.identity, host.key_args, host.inputs});
  m_host_request = request;
  if (take_local_object(out, request, StepTool::host, host.object)) {
    if (early) early->join(), early.reset();
    return true;
  }
  // Looked up first, unless a device step of this compile missed: then the object is almost
  // surely new, and the text goes at once (the daemon looks it up before it compiles).
  const bool send_text = !host.contents.empty() && host.contents.size() == host.inputs.size();
  std::optional<v1::StepResponse> found;
  if (!send_text || !m_device_missed) {
    found = ask_daemon(request, StepTool::host);
    if (holds_object(found)) {
      if (early) early->join(), early.reset();  // its object is replaced by the one found
      return take_object(out, *found, StepTool::host, host.object);
    }
  }
  if (send_text && (found || m_device_missed)) {
    // The daemon compiles the text itself: its object, on the farm's cores.
    v1::StepRequest run = request;
    for (std::size_t i = 0; i < host.contents.size(); ++i) {
      run.mutable_inputs(static_cast<int>(i))->clear_sha256();
      run.mutable_inputs(static_cast<int>(i))->set_content(std::move(host.contents[i]));
    }
    auto ran = ask_daemon(run, StepTool::host);
    if (holds_object(ran)) {
      if (early) early->join(), early.reset();
      if (ran->outcome() == v1::OUTCOME_HIT) return take_object(out, *ran, StepTool::host, host.object);
      m_stats.add("host.miss");
      m_stats.add("host.compiled_by_daemon");
      return use_object(out, ran->outputs(0).content(), ran->stdout_text(), ran->stderr_text(), host.object);
    }
    // It could not (another compiler, an option it does not run, or the compile failed there):
    // here, where the compiler's own messages reach the build.
  }
  if (!compile_here()) return false;
  if (client() == nullptr) {  // no daemon answers: this machine keeps it
    m_stats.add("host.local");
    if (auto key = object_key(request)) LocalObjects::open().put(*key, read_file(host.object), {}, compiled.error_output);
    return true;
  }
  offer_object(std::move(request), StepTool::host, host.object, {}, compiled.error_output);
  return true;
}

std::optional<Key> object_key(const v1::StepRequest& request) {
  StepSpec spec;
  auto tool = wire::from_proto(request.tool());
  auto identity = digest_from_hex(request.tool_digest());
  if (!tool || !identity) return std::nullopt;
  spec.tool = *tool;
  spec.tool_digest = *identity;
  spec.args.assign(request.args().begin(), request.args().end());
  spec.outputs.assign(request.outputs().begin(), request.outputs().end());
  std::vector<Digest> digests;
  for (const v1::StepFile& file : request.inputs()) {
    spec.inputs.push_back(file.name());
    auto digest = file.content().empty() ? digest_from_hex(file.sha256()) : std::optional<Digest>(sha256(file.content()));
    if (!digest) return std::nullopt;
    digests.push_back(*digest);
  }
  return compute_step_key(spec, digests);
}

v1::StepRequest Launch::object_request(const ObjectName& name) {
  std::vector<Digest> digests;
  for (const auto& [file, digest] : name.inputs) digests.push_back(digest);
  return wire::step_request(name.spec(), {}, digests);
}

void Launch::keep_a_copy(const v1::StepRequest& request, const v1::StepResponse& found) {
  auto key = object_key(request);
  if (key) LocalObjects::open().put(*key, found.outputs(0).content(), found.stdout_text(), found.stderr_text());
}

bool Launch::holds_object(const std::optional<v1::StepResponse>& found) {
  return found && found->exit_code() == 0 && found->outputs_size() == 1;
}

bool Launch::take_object(Printed& out, const v1::StepResponse& found, StepTool tool, const std::string& object,
                         std::string_view counted_as) {
  if (!use_object(out, found.outputs(0).content(), found.stdout_text(), found.stderr_text(), object)) return false;
  m_stats.add(std::string(counted_as.empty() ? step_tool_name(tool) : counted_as) + ".hit");
  return true;
}

bool Launch::use_object(Printed& printed, std::string_view bytes, std::string_view out, std::string_view err,
                        const std::string& object) {
  if (!write_file(object, bytes)) return false;
  printed.add(out, err);
  return true;
}

void Launch::offer_object(v1::StepRequest request, StepTool tool, const std::string& object, const std::string& out,
                          const std::string& err, std::string_view counted_as) {
  const std::string counted(counted_as.empty() ? step_tool_name(tool) : counted_as);
  m_stats.add(counted + ".miss");
  auto keep_here = [&] {
    if (auto key = object_key(request)) LocalObjects::open().put(*key, read_file(object), out, err);
  };
  kcache::Client* c = client();
  if (c == nullptr || m_unpublished) return keep_here();
  request.mutable_offered()->set_name(std::string(k_step_object));
  request.mutable_offered()->set_content(read_file(object));
  request.set_offered_stdout(out);
  request.set_offered_stderr(err);
  // Kept if this client may publish; the build goes on either way, with its own object. This
  // machine keeps a copy of a whole compile's or device link's too: its next build takes it
  // without asking the daemon (a direct hit then needs no round trip at all).
  auto kept = c->step(request);
  if (kept) {
    if (tool == StepTool::nvcc) keep_here();
    return;
  }
  if (kept.error().code == ErrorCode::k_permission_denied) {
    m_unpublished = true;  // the compile role: no later offer of this launch is sent
    m_stats.add(counted + ".unpublished");
    keep_here();
  } else {
    m_stats.add("launcher.refused." + counted);
  }
}

bool Launch::take_local_object(Printed& out, const v1::StepRequest& request, StepTool tool, const std::string& object,
                               std::string_view counted_as) {
  auto key = object_key(request);
  auto found = key ? LocalObjects::open().get(*key) : std::nullopt;
  if (!found || !use_object(out, found->object, found->stdout_text, found->stderr_text, object)) return false;
  m_stats.add(std::string(counted_as.empty() ? step_tool_name(tool) : counted_as) + ".local_hit");
  return true;
}

int Launch::unchanged(const std::vector<std::string>& real, const std::string& reason) {
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

int Launch::run_unchanged(const std::vector<std::string>& real) {
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

int Launch::finish() {
  for (const auto& [from, to] : m_finals) {
    if (!move_into_place(from, to)) {
      std::fprintf(stderr, "kcache: cannot write %s\n", to.c_str());
      return 1;
    }
  }
  if (!m_later_source) std::fwrite(m_driver.err.data(), 1, m_driver.err.size(), stderr);
  for (const Printed& p : m_printed) {
    std::fwrite(p.out.data(), 1, p.out.size(), stdout);
    std::fwrite(p.err.data(), 1, p.err.size(), stderr);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  return 0;
}

std::optional<Digest> Launch::direct_key() {
  if (m_direct_key) return *m_direct_key;
  m_direct_key.emplace();
  const OptionTable* table = direct_table();
  if (table == nullptr || m_device_link || std::getenv("KCACHE_NODIRECT") != nullptr) return std::nullopt;
  auto args = direct_args(*table, m_args);
  if (!args) return std::nullopt;
  auto tools = direct_tools();
  if (!tools) return std::nullopt;
  std::error_code ec;
  *m_direct_key = direct_key_of(*tools, *args, m_env, fs::current_path(ec));
  return *m_direct_key;
}

v1::StepRequest Launch::manifest_request(const Digest& key) {
  StepSpec spec;
  spec.tool = StepTool::manifest;
  spec.tool_digest = key;
  spec.inputs = {"direct"};
  spec.outputs = {std::string(k_step_manifest)};
  return wire::step_request(spec, {}, std::vector<Digest>{key});
}

bool Launch::direct_hit() {
  auto key = direct_key();
  if (!key) return false;
  fs::path path = manifest_path(*key);
  if (path.empty()) return false;
  // This machine's manifest, else the one a publish client wrote through the daemon.
  std::string text = read_file(path.string());
  if (text.empty() || !direct_hit_from(text)) {
    auto found = ask_daemon(manifest_request(*key), StepTool::manifest);
    if (!found || found->exit_code() != 0 || found->outputs_size() != 1) return m_stats.add("direct.miss"), false;
    text = found->outputs(0).content();
    if (!direct_hit_from(text)) return m_stats.add("direct.miss"), false;
    m_stats.add("direct.shared_manifest");
    write_manifest_file(path, text);
  }
  m_stats.add("direct.hit");
  return true;
}

bool Launch::direct_hit_from(const std::string& text) {
  auto entries = read_manifest(text);
  if (!entries) return false;
  std::error_code ec;
  const fs::path folder = fs::current_path(ec);
  const FileSystem files = real_file_system();
  for (const ManifestEntry& entry : *entries) {
    if (!manifest_entry_holds(entry, folder, files)) continue;
    v1::StepRequest request;
    if (!request.ParseFromString(entry.request)) return false;
    auto tool = wire::from_proto(request.tool());
    // nvcc's whole compile's object, or clang's host object (the compile's own), counted as its
    // hit: from this machine's objects, else the daemon's; where it is gone (evicted), the
    // compile runs.
    if (!tool || (*tool != StepTool::nvcc && *tool != StepTool::host)) return false;
    const std::string object = work() + "kcache-object.o";
    Printed printed{entry.out, entry.err};
    if (!take_local_object(printed, request, *tool, object)) {
      auto found = ask_daemon(request, *tool);
      if (!holds_object(found) || !take_object(printed, *found, *tool, object)) return false;
      keep_a_copy(request, *found);
    }
    m_driver.err = entry.driver;
    stage(object, object_path(*direct_table(), m_args));
    if (!entry.dependencies.empty()) {
      const std::string staged = work() + "kcache-dependencies.d";
      if (!write_file(staged, entry.dependencies)) return false;
      stage(staged, dependency_options(*direct_table(), m_args).file);
    }
    m_printed.push_back(std::move(printed));
    return true;
  }
  return false;
}

void Launch::write_manifest_file(const fs::path& path, const std::string& text) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  const std::string staged = path.string() + ".kcache-" + std::to_string(::getpid());
  if (!write_file(staged, text)) return fs::remove(staged, ec), void();
  fs::rename(staged, path, ec);
  if (ec) fs::remove(staged, ec);
}

void Launch::direct_record(const v1::StepRequest& whole, const std::vector<std::string>& read_files, const Printed& printed,
                           const std::string& dependencies) {
  auto key = direct_key();
  if (!key) return;
  fs::path path = manifest_path(*key);
  if (path.empty()) return;
  std::error_code ec;
  const fs::path folder = fs::current_path(ec);
  auto absolute = [&](const std::string& p) { return p.front() == '/' ? p : (folder / p).lexically_normal().string(); };
  // A file changed less than a second before the compile began (or since) may change again within
  // its time stamp's tick unseen: its times are not trusted, it is hashed at every look (ccache's rule).
  const auto trusted_before = std::chrono::duration_cast<std::chrono::nanoseconds>(m_started.time_since_epoch()).count() -
                              1'000'000'000LL;
  ManifestEntry entry;
  std::vector<std::string> read;  // absolute, for the shadow probes
  const FileSystem files = real_file_system();
  for (const std::string& name : read_files) {
    if (name.empty() || name.front() == '<' || name.starts_with(work())) continue;
    auto before = files.stat(absolute(name));
    if (!before) return;  // a file the key cannot name
    std::string bytes = read_whole_file(absolute(name));
    if (bytes.size() != before->size) return;  // changing as it is read
    if (reads_the_time(bytes)) {
      m_stats.add("direct.reads_the_time");
      return;
    }
    ManifestFile f;
    f.path = name;
    f.size = bytes.size();
    f.digest = sha256(bytes);
    if (before->mtime_ns < trusted_before && before->ctime_ns < trusted_before) {
      f.mtime_ns = before->mtime_ns;
      f.ctime_ns = before->ctime_ns;
    }
    entry.files.push_back(std::move(f));
    read.push_back(absolute(name));
  }
  if (entry.files.empty()) return;
  auto args = direct_args(*direct_table(), m_args);
  if (!args) return;
  std::vector<std::string> include_dirs;
  for (const std::string& d : args->include_dirs) {
    if (!d.empty()) include_dirs.push_back(absolute(d));
  }
  // The system's and the toolkit's folders, as named and as the preprocessor may name them
  // (GCC writes a symbolic link's target: /usr/local/cuda-13.0/include for /usr/local/cuda/...).
  std::vector<std::string> system_roots = {"/usr/include", "/usr/lib", "/usr/local/include"};
  if (auto top = m_env.find("TOP"); top != m_env.end()) {
    system_roots.push_back(fs::path(top->second).lexically_normal().string());
    fs::path real = fs::canonical(top->second, ec);
    if (!ec) system_roots.push_back(real.string());
  }
  entry.absent = shadow_probes(read, include_dirs, system_roots, [](const std::string& p) {
    struct stat st {};
    return ::lstat(p.c_str(), &st) == 0;
  });
  entry.request = whole.SerializeAsString();
  if (auto key = object_key(whole)) entry.object = key->hex();
  entry.driver = m_driver.err;
  entry.out = printed.out;
  entry.err = printed.err;
  if (!dependencies.empty()) entry.dependencies = read_file(dependencies);
  std::vector<ManifestEntry> entries = {std::move(entry)};
  if (auto old = read_manifest(read_file(path.string()))) {
    for (ManifestEntry& e : *old) {
      if (e.request != entries.front().request && entries.size() < k_manifest_entries) entries.push_back(std::move(e));
    }
  }
  const std::string text = write_manifest(entries);
  write_manifest_file(path, text);
  m_stats.add("direct.recorded");
  // Through the daemon for other machines, where this client may publish: a manifest points
  // builds at objects, so only a publish client's (or any, without tokens) is kept.
  kcache::Client* c = m_unpublished ? nullptr : client();
  if (c == nullptr) return;
  v1::StepRequest offer = manifest_request(*key);
  offer.mutable_offered()->set_name(std::string(k_step_manifest));
  offer.mutable_offered()->set_content(text);
  auto kept = c->step(offer);
  if (kept) {
    m_stats.add("manifest.published");
  } else if (kept.error().code == ErrorCode::k_permission_denied) {
    m_unpublished = true;
    m_stats.add("manifest.unpublished");
  }
}

}  // namespace kcache::launcher
