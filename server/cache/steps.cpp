// The cache core's build steps (Cache::step): device steps, and host compiles from a client's
// preprocessed text, run on the pool once per key; host objects looked up, or kept when a publish
// client offers them, behind the host wall. The same tiers as compiles: the store (hot, then
// local), the remote tier, then the pool.
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <regex>

#include "cache/cache.hpp"
#include "remote/entry.hpp"

namespace kcache::server {
namespace {

using Clock = std::chrono::steady_clock;

// The images a step's entry holds: one file per output, in order, or a host step's object (what
// it printed is kept beside them, when it printed anything).
std::vector<ImageRequest> output_images(Side side, const std::vector<std::string>& outputs) {
  if (side == Side::host && outputs == std::vector<std::string>{std::string(k_step_manifest)}) {
    return {{std::string(k_step_manifest), ImageKind::file}};
  }
  if (side == Side::host) return {{std::string(k_step_object), ImageKind::object}};
  std::vector<ImageRequest> out;
  for (const std::string& name : outputs) out.push_back({name, ImageKind::file});
  return out;
}

EntryRecord step_record(StepTool tool) {
  auto now = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
  // cicc reads preprocessed CUDA C++, ptxas PTX, the host compile the host side of CUDA C++.
  return EntryRecord{tool == StepTool::ptxas ? InputFormat::ptx : InputFormat::cuda_cpp,
                     std::string(step_tool_name(tool)), static_cast<std::uint64_t>(now.count())};
}

// What a run wrote and printed, as the images of its entry. A host step's object is an object
// image: the host wall checks it before it is stored, as every host object.
std::vector<Image> step_images(const StepRun& run, Side side) {
  std::vector<Image> images;
  for (const auto& [name, bytes] : run.outputs) {
    bool object = side == Side::host && name == k_step_object;
    images.push_back(make_image({name, object ? ImageKind::object : ImageKind::file}, bytes));
  }
  if (!run.stdout_text.empty()) images.push_back(make_image({std::string(k_step_stdout), ImageKind::file}, run.stdout_text));
  if (!run.stderr_text.empty()) images.push_back(make_image({std::string(k_step_stderr), ImageKind::file}, run.stderr_text));
  return images;
}

// The SHA-256 of a step's arguments, each tagged: in the log, so that a run is traced to exactly
// what it was asked to run without logging a peer's bytes.
std::string args_digest(const std::vector<std::string>& args) {
  Sha256 h;
  for (const std::string& arg : args) hash_tagged_field(h, 1, arg);
  return to_hex(h.finish());
}

void log_step(const StepAsk& ask, std::string_view key_hex, Clock::time_point start,
              const Expected<StepAnswer>& answered) {
  StepTool tool = ask.spec.tool;
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  const std::string client = ask.client.empty() ? "-" : ask.client;
  if (!answered) {
    spdlog::warn("step tool={} client={} args={:.16} key={:.12} outcome=error ms={:.1f} code={} error={:.1024}",
                 step_tool_name(tool), client, args_digest(ask.spec.args), key_hex, ms,
                 error_code_name(answered.error().code), answered.error().message);
    return;
  }
  spdlog::info("step tool={} client={} args={:.16} key={:.12} outcome={} exit={} ms={:.1f}", step_tool_name(tool),
               client, args_digest(ask.spec.args), key_hex,
               ask.offered                                                 ? "stored"
               : answered->outputs.empty() && answered->exit_code == 0 ? "absent"
                                                                       : outcome_name(answered->outcome),
               answered->exit_code, ms);
}

}  // namespace

Expected<StepAnswer> Cache::step(const StepAsk& ask) {
  auto start = Clock::now();
  scan_host_compilers_soon();
  std::string key_hex = "-";
  auto answered = answer_step(ask, key_hex);
  StepCounters& count = m_step_counters[static_cast<std::size_t>(ask.spec.tool) - 1];
  if (!answered || answered->exit_code != 0) {
    ++count.failed;
  } else if (ask.offered) {
    ++count.stored;
  } else {
    ++(answered->outcome == Outcome::hit         ? count.hits
       : answered->outcome == Outcome::coalesced ? count.coalesced
                                                 : count.misses);
  }
  log_step(ask, key_hex, start, answered);
  return answered;
}

void Cache::count_uncacheable(std::string_view reason) {
  constexpr std::size_t k_max_reasons = 64, k_max_reason_bytes = 64;
  bool printable = !reason.empty() && reason.size() <= k_max_reason_bytes &&
                   std::all_of(reason.begin(), reason.end(), [](char c) { return c >= 0x20 && c < 0x7f; });
  std::string name = printable ? std::string(reason) : "other";
  std::lock_guard lock(m_uncacheable_mutex);
  if (!m_uncacheable.contains(name) && m_uncacheable.size() >= k_max_reasons) name = "other";
  ++m_uncacheable[name];
}

std::map<std::string, std::uint64_t> Cache::uncacheable() const {
  std::lock_guard lock(m_uncacheable_mutex);
  return m_uncacheable;
}

Expected<Digest> Cache::step_tool(StepTool tool) {
  std::lock_guard lock(m_step_tool_mutex);
  auto it = m_step_tools.find(tool);
  if (it == m_step_tools.end()) it = m_step_tools.emplace(tool, own_step_tool_identity(m_compiler.toolchain(), tool)).first;
  return it->second;
}

Expected<StepAnswer> Cache::answer_step(const StepAsk& ask, std::string& key_hex) {
  if (ask.input_bytes > m_limits.max_module_bytes) {
    return make_error(ErrorCode::k_resource_exhausted, "the step's files are " + std::to_string(ask.input_bytes) +
                                                           " bytes; this kcached accepts " +
                                                           std::to_string(m_limits.max_module_bytes) +
                                                           " at most (--max-module-size)");
  }
  const StepTool tool = ask.spec.tool;
  const Side side = step_side(tool);
  if (side == Side::device) {
    if (std::string why = steps_refused(); !why.empty()) return make_error(ErrorCode::k_failed_precondition, why);
    auto own = step_tool(tool);
    if (!own) return own.error();
    if (*own != ask.spec.tool_digest) {
      return make_error(ErrorCode::k_failed_precondition,
                        "this kcached's " + std::string(step_tool_name(tool)) + " (identity " + to_hex(*own).substr(0, 16) +
                            ") is not the one the client runs (" + to_hex(ask.spec.tool_digest).substr(0, 16) +
                            "): the toolkits differ, so the client runs the step itself");
    }
  }
  StepAnswer out;
  out.key = compute_step_key(ask.spec, ask.input_digests);
  key_hex = out.key.hex();
  // A manifest offered replaces the one kept (it lists its machine's newest compiles first).
  if (tool == StepTool::manifest && ask.offered) return keep_offered(ask, out);
  if (auto stored = stored_step(side, out.key, ask.spec.outputs)) {
    stored->key = out.key;
    return *std::move(stored);
  }
  if (side == Side::host && (ask.offered || ask.inputs.empty())) return keep_offered(ask, out);
  if (side == Side::device && ask.inputs.size() != ask.spec.inputs.size()) {
    out.outcome = Outcome::miss;  // looked up by digests, absent: the client sends the bytes to run it
    return out;
  }
  // Run here: a device step, or a host compile from the client's preprocessed text (an object
  // this daemon made, which any client may then link).
  std::filesystem::path program;
  if (side == Side::host) {
    if (tool != StepTool::host) {
      return make_error(ErrorCode::k_invalid_argument, "only a host step runs on the daemon; nvcc's whole compile is looked up");
    }
    if (std::string why = steps_refused(); !why.empty()) return make_error(ErrorCode::k_failed_precondition, why);
    if (auto ok = check_host_run(ask.spec); !ok) return ok.error();
    auto driver = host_compiler(ask.spec.tool_digest);
    if (!driver) return driver.error();
    program = *driver;
  }
  Answer how = Answer::compiled;
  auto run = run_step_once(ask, out.key, how, program);
  if (!run) return run.error();
  if (how == Answer::remote || (how == Answer::coalesced && run->outputs.empty() && run->exit_code == 0)) {
    // Another daemon's run, or one that finished here just now: read as stored.
    auto stored = stored_step(side, out.key, ask.spec.outputs);
    if (!stored) return make_error(ErrorCode::k_internal, "the step's entry " + key_hex + " vanished as it was read");
    stored->key = out.key;
    stored->outcome = how == Answer::remote ? Outcome::hit : Outcome::coalesced;
    return *std::move(stored);
  }
  out.outcome = how == Answer::coalesced ? Outcome::coalesced : Outcome::miss;
  out.exit_code = run->exit_code;
  out.outputs = std::move(run->outputs);
  out.stdout_text = std::move(run->stdout_text);
  out.stderr_text = std::move(run->stderr_text);
  return out;
}

Expected<StepAnswer> Cache::keep_offered(const StepAsk& ask, StepAnswer out) {
  const Side side = step_side(ask.spec.tool);
  out.outcome = Outcome::miss;
  if (!ask.offered) return out;  // looked up, absent: the client sends its text to run, or compiles it
  StepRun run;
  run.outputs.emplace_back(ask.spec.outputs.front(), std::string(*ask.offered));
  run.stderr_text = std::string(ask.offered_stderr);
  run.stdout_text = std::string(ask.offered_stdout);
  std::vector<Image> images = step_images(run, side);
  EntryRecord record = step_record(ask.spec.tool);
  if (auto put = m_store.put(side, out.key, record, images); !put) {
    if (put.error().code == ErrorCode::k_resource_exhausted) return out;  // larger than the cache: not kept
    return make_error(ErrorCode::k_invalid_argument, "the host object was not stored: " + put.error().message);
  }
  if (m_remote != nullptr) m_remote->write(side, out.key, record, std::move(images), std::nullopt);
  return out;
}

std::string Cache::steps_refused() const {
  if (m_jail.mode != "none" || m_jail.unjailed_steps) return {};
  return "this kcached runs no build step: it cannot jail the tools it would run (" + m_jail.reason +
         "), and was not started with --allow-unjailed-steps; the client runs the step itself";
}

void Cache::scan_host_compilers_soon() {
  std::unique_lock lock(m_host_compilers_mutex, std::try_to_lock);
  if (!lock.owns_lock() || m_host_compilers || m_host_compilers_scan.valid()) return;
  m_host_compilers_scan = std::async(std::launch::async, [this] {
    std::lock_guard scan_lock(m_host_compilers_mutex);
    scan_host_compilers();
  });
}

void Cache::scan_host_compilers() {
  if (m_host_compilers) return;
  // Each C and C++ driver of the usual folders, by the name a build calls it (the name is part
  // of what --version prints, so g++ and g++-12 are two identities of one program).
  static const std::regex k_driver(R"((g\+\+|gcc|c\+\+|cc|clang\+\+|clang)(-[0-9]+(\.[0-9]+)*)?)");
  std::map<std::string, Expected<Digest>> files;  // a file's digest by real path, hashed once
  auto digest_of = [&files](const std::string& path) -> Expected<Digest> {
    std::error_code ec;
    std::string real = std::filesystem::canonical(path, ec).string();
    if (ec) return make_error(ErrorCode::k_not_found, "cannot find " + path);
    auto it = files.find(real);
    if (it == files.end()) {
      auto d = sha256_file(real);
      it = files.emplace(real, d ? Expected<Digest>(*d) : make_error(ErrorCode::k_internal, "cannot read " + real)).first;
    }
    return it->second;
  };
  auto started = Clock::now();
  m_host_compilers.emplace();
  for (const char* folder : {"/usr/bin", "/usr/local/bin"}) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
      std::string name = entry.path().filename().string();
      if (!std::regex_match(name, k_driver) || ::access(entry.path().c_str(), X_OK) != 0) continue;
      if (auto id = host_compiler_identity(entry.path().string(), "cc1plus", digest_of)) {
        m_host_compilers->emplace(*id, entry.path());
      }
      // clang also as the launcher runs its host side of CUDA (clang -cc1), named by its files.
      if (name.starts_with("clang")) {
        std::error_code real;
        std::string program = std::filesystem::canonical(entry.path(), real).string();
        if (auto id = clang_compiler_identity(program, digest_of); id && !real) m_host_compilers->emplace(*id, program);
      }
    }
  }
  spdlog::info("host compilers for build steps: {} found in {:.0f} ms", m_host_compilers->size(),
               std::chrono::duration<double, std::milli>(Clock::now() - started).count());
}

Expected<std::filesystem::path> Cache::host_compiler(const Digest& identity) {
  std::lock_guard lock(m_host_compilers_mutex);
  scan_host_compilers();
  auto it = m_host_compilers->find(identity);
  if (it != m_host_compilers->end()) return it->second;
  return make_error(ErrorCode::k_failed_precondition,
                    "this kcached has no host compiler of identity " + to_hex(identity).substr(0, 16) +
                        " (another compiler or version than the client's): the client compiles the object itself");
}

std::optional<StepAnswer> Cache::stored_step(Side side, const Key& key, const std::vector<std::string>& outputs) {
  std::vector<ImageRequest> wanted = output_images(side, outputs);
  auto metas = m_store.list(side, key);
  if (metas && metas->empty() && read_through(side, key, &wanted)) metas = m_store.list(side, key);
  if (!metas || metas->empty()) return std::nullopt;
  StepAnswer out;
  out.outcome = Outcome::hit;
  for (const ImageRequest& want : wanted) {
    auto image = get_image(side, key, want);
    if (!image) return std::nullopt;
    out.outputs.emplace_back(want.arch, (*image)->data);
  }
  for (const ImageMeta& meta : *metas) {
    if (meta.kind != ImageKind::file || (meta.arch != k_step_stdout && meta.arch != k_step_stderr)) continue;
    auto image = get_image(side, key, meta.id());
    if (!image) return std::nullopt;
    (meta.arch == k_step_stdout ? out.stdout_text : out.stderr_text) = (*image)->data;
  }
  return out;
}

Expected<StepRun> Cache::run_step_once(const StepAsk& ask, const Key& key, Answer& answer,
                                       const std::filesystem::path& program) {
  const Side side = step_side(ask.spec.tool);
  // Owned by the queued run, which may outlive this request.
  struct Step {
    StepWork work;
    std::vector<std::string> inputs;  // the bytes work.inputs point into
  };
  auto step = std::make_shared<Step>();
  step->inputs.assign(ask.inputs.begin(), ask.inputs.end());
  step->work.tool = ask.spec.tool;
  step->work.program = program;
  step->work.args = ask.spec.args;
  step->work.outputs = ask.spec.outputs;
  for (std::size_t i = 0; i < ask.spec.inputs.size(); ++i) step->work.inputs.emplace_back(ask.spec.inputs[i], step->inputs[i]);
  step->work.deadline = Clock::now() + m_limits.job_timeout;

  Work<StepRun> work;
  work.what = "step";
  work.run = [this, step, key](std::size_t, const std::vector<unsigned>& cpus) {
    return m_workers.run_step(step->work, cpus, key);
  };
  work.merge = [](std::vector<Expected<StepRun>> parts) { return std::move(parts.front()); };
  work.entry = [step, side](const StepRun& run) -> std::optional<std::pair<EntryRecord, std::vector<Image>>> {
    if (run.exit_code != 0) return std::nullopt;  // the tool's own failure: answered, never stored
    return std::make_pair(step_record(step->work.tool), step_images(run, side));
  };
  work.ran = [this, step, side, key](StepRun&, const std::vector<Image>& images, double seconds) {
    ++m_counters.compiles;
    m_activity.compiled(side, key.hex(), images, seconds, step_tool_name(step->work.tool));
  };
  work.too_large = [](StepRun&, const Error&) {};  // answered whole, kept nowhere
  return run_once(m_steps_in_flight, side, key, output_images(side, ask.spec.outputs), answer, std::move(work));
}

}  // namespace kcache::server
