// What every compiler the launcher fronts shares: a work folder of the launch's own, its local
// counters, the daemon (build steps: kcache/step.hpp), device steps sent there or run here the
// same way, host objects looked up and offered, and the fall back to the real compiler. nvcc.cpp
// and clang.cpp read each compiler's own plan into these steps.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kcache/client.hpp"
#include "kcache/expected.hpp"
#include "kcache/process.hpp"
#include "kcache/sha256.hpp"
#include "kcache/step.hpp"
#include "launcher/local_stats.hpp"
#include "launcher/options.hpp"
#include "launcher/plan_runner.hpp"
#include "launcher/tool_identity.hpp"

namespace kcache::launcher {

std::string basename_of(std::string_view path);
std::string read_file(const std::string& path);
bool write_file(const std::string& path, std::string_view bytes);

// `name` as PATH (of `env`) finds it; a name with a '/' is itself.
std::string find_program(const std::string& name, const std::map<std::string, std::string>& env);


// The key an object request names (the daemon's step key for it; this machine's objects keep
// their copies under it); nullopt for a malformed one.
std::optional<Key> object_key(const v1::StepRequest& request);

// Each launch works in a folder of its own under the temporary folder: kcache-cc-<pid>-XXXXXX.
inline constexpr const char* k_work_folder_prefix = "kcache-cc-";
// How long a folder whose launch is gone must have been left untouched before a later launch
// removes it (remove_folders_of_dead_processes): another pid namespace (a container sharing /tmp)
// may have a live launch of that pid, waiting on a long step.
inline constexpr std::chrono::seconds k_abandoned_work_folder_age{3600};

// One launch of a compiler. A subclass plans the compile and runs its steps through these.
class Launch {
 public:
  Launch(std::string compiler, std::vector<std::string> args);
  Launch(const Launch&) = delete;
  Launch& operator=(const Launch&) = delete;
  virtual ~Launch();  // removes the work folder

  // The launch, the same for every compiler: its option files read, the one rule for sources
  // (the compiler unchanged, counted with its reason; or each source its own launch), the
  // compiler's plan, its tasks run, and the end: the compiler's exit code.
  int run();

 protected:
  // What each compiler says of itself.
  virtual std::optional<std::string> read_option_files() = 0;  // the reason when one cannot be read
  virtual Invocation invocation() const = 0;
  virtual std::unique_ptr<Launch> for_source(std::vector<std::string> args) const = 0;
  virtual std::optional<std::string> plan() = 0;  // the reason when the launcher does not run it
  virtual std::vector<Task> tasks() = 0;
  virtual void after_plan() {}  // once every task succeeded, before finish()
  // Direct mode (direct.hpp): the compiler's option table and what names its tools (each
  // program's digest, the host compiler's identity), or nullopt where it has none.
  virtual const OptionTable* direct_table() const { return nullptr; }
  virtual std::optional<std::string> direct_tools() { return std::nullopt; }
  // Whether the compile is answered before any plan is made (direct_hit; nvcc's device link, from
  // its inputs' bytes): its outputs staged, what it printed kept.
  virtual bool answered_before_plan() { return direct_hit(); }

  // The manifest's key for this command line in this folder and environment; nullopt: none.
  std::optional<Digest> direct_key();
  // The compile answered from its manifest: the object (from this machine's objects or the
  // daemon) and the dependency file staged, what the skipped steps printed kept. False: the
  // compile runs as it would.
  bool direct_hit();
  bool direct_hit_from(const std::string& manifest);  // the first entry that holds, taken
  static v1::StepRequest manifest_request(const Digest& key);  // the daemon's copy of a manifest
  static void write_manifest_file(const std::filesystem::path& path, const std::string& text);
  // After a compile whose whole object `whole` names: its manifest entry, from the files the
  // preprocessors read (`read`: their texts' line markers, files_of_markers), what they and the
  // driver printed, and the dependency file staged at `dependencies` (empty: none).
  void direct_record(const v1::StepRequest& whole, const std::vector<std::string>& read, const Printed& printed,
                     const std::string& dependencies);

  // A file of the work folder (a preprocessor's text), read once: the whole compile's key, the
  // dependency file, the manifest and the step that compiles it read the same megabytes. Read
  // again where its size or modification time changed; rewrite_text replaces it.
  std::shared_ptr<const std::string> text_of(const std::string& path);
  bool rewrite_text(const std::string& path, std::string bytes);
  // The SHA-256 of text_of(path) without the work folder's name (without_work_folder), once.
  Digest text_digest(const std::string& path);

  // What a compile answered before its plan printed, printed after the driver's messages.
  void add_printed(Printed printed) { m_printed.push_back(std::move(printed)); }

  // The launch's folder for the compiler's temporary files ("" when none could be made); ends in '/'.
  const std::string& work() const { return m_work_prefix; }
  // `text` with every mention of the work folder taken out (its files by their names alone), so
  // that what a key reads names no launch of its own.
  std::string without_work_folder(std::string text) const;

  // Runs argv here with the plan's environment, in `cwd` (empty: the caller's). What it prints
  // goes to `out` (none: not printed); `result` gets the run.
  bool run_here(const std::vector<std::string>& argv, Printed* out, const std::string& cwd = {},
                ProcessResult* result = nullptr);

  // A device step (cicc, clang, ptxas) of the plan, `argv` as the plan runs it: every file in the
  // work folder is renamed by order and extension (f0.ii, f1.ptx, ...), so one arch's work has one
  // key whatever the plan's temporary names or other archs; `renamed` gives other words their
  // step spelling (clang's libdevice). Sent to the daemon as a step with `identity`, or, when it
  // cannot take it, run here: `local` as given (in the caller's folder), or when empty the step's
  // own arguments in a folder of its own.
  bool device_step(Printed& out, StepTool tool, const std::vector<std::string>& argv, const Expected<Digest>& identity,
                   const std::map<std::string, std::string>& renamed = {}, const std::vector<std::string>& local = {});

  // A host object: looked up by `key_args` and the digests of what the compile reads (`inputs`:
  // name and bytes' digest). On a miss, where `contents` holds the inputs' bytes (the
  // preprocessed translation unit first), the daemon compiles it with its own compiler of `identity`
  // (in its jail) and keeps the object, which other machines may then link. Else, or where the
  // daemon cannot, it is compiled here by `compile` (which writes `object`) and offered: a
  // daemon keeps it only from a client with the publish role. `prepare`, when set, fills in the
  // key first (the preprocessing that names the input).
  struct HostCompile {
    Expected<Digest> identity = Digest{};
    std::vector<std::string> key_args;
    std::vector<std::pair<std::string, Digest>> inputs;
    // The bytes of each of inputs, for the daemon to compile: the text first (then, for clang, the
    // device images it embeds); empty: not sent.
    std::vector<std::string> contents;
    std::vector<std::string> compile;
    std::string object;
    std::function<bool(HostCompile&)> prepare;
  };
  // When a device step of this compile missed, the object is almost surely new (it embeds the
  // device image): where no daemon is asked, the compile then starts at once, beside `prepare`.
  bool host_object(Printed& out, HostCompile& host);

  // A host-side object's request (the host compile's, nvcc's whole compile's, a device link's),
  // asking for the object by its name (direct_key.hpp).
  static v1::StepRequest object_request(const ObjectName& name);
  // Whether the daemon's answer to it (ask_daemon) found the object; take_object then writes it to
  // `object` and keeps what its compile printed, to print.
  static bool holds_object(const std::optional<v1::StepResponse>& found);
  // A copy of an object the daemon answered with, in this machine's objects: a later build of the
  // same takes it without asking.
  static void keep_a_copy(const v1::StepRequest& request, const v1::StepResponse& found);
  bool take_object(Printed& out, const v1::StepResponse& found, StepTool tool, const std::string& object,
                   std::string_view counted_as = {});
  // Writes an object from anywhere but this compile (the daemon, this machine's store) to
  // `object`, and keeps what its compile printed, to print; false when it cannot be written.
  bool use_object(Printed& printed, std::string_view bytes, std::string_view out, std::string_view err,
                  const std::string& object);
  // Offers the object compiled here, with what its compile printed, under the request's key; the
  // build goes on whether the daemon keeps it or not. What no daemon keeps for this client (it
  // may not publish, or none answers) is kept in this machine's own objects instead.
  void offer_object(v1::StepRequest request, StepTool tool, const std::string& object, const std::string& out,
                    const std::string& err, std::string_view counted_as = {});
  // This machine's own objects (local_objects.hpp), looked at before the daemon is asked: a hit
  // writes `object`, keeps what its compile printed, and counts TOOL.local_hit.
  bool take_local_object(Printed& out, const v1::StepRequest& request, StepTool tool, const std::string& object,
                         std::string_view counted_as = {});

  // A device step tool's identity (device_tool_identity, kcache/step.hpp): its program as the
  // plan's PATH finds it, the libdevice it links (cicc, clang), each file's digest kept by identity.
  Expected<Digest> device_identity(StepTool tool, const std::string& program, const std::string& libdevice) {
    return device_tool_identity(tool, find_program(program, m_env), libdevice, file_digest);
  }

  // The host compiler driver's identity: its program, the compiler proper it names for `proper`
  // (cc1plus; empty: none) and its version text, kept by the driver's file identity.
  Expected<Digest> host_compiler_identity(const std::string& program, const std::string& proper);

  // The daemon's answer to a step; std::nullopt when it cannot give one (down, or refused).
  std::optional<v1::StepResponse> ask_daemon(const v1::StepRequest& request, StepTool tool);

  // The compile as the real compiler runs it, counted by why (locally and on the daemon).
  int unchanged(const std::vector<std::string>& real, const std::string& reason);
  // The real compiler, its outputs, diagnostics and exit code.
  int run_unchanged(const std::vector<std::string>& real);

  // Puts each staged output in place and prints what the steps printed: the compile's end.
  int finish();

  // Runs the plan's tasks (plan_runner.hpp), what each printed kept for the end in plan order.
  bool run_plan(const std::vector<Task>& tasks);
  // What the tasks printed in these slots, in order (after run_plan).
  Printed printed_in(const std::vector<std::size_t>& slots) const;
  // The work folder's files an argument list names.
  std::vector<std::string> work_files(const std::vector<std::string>& argv) const {
    return launcher::work_files(argv, m_work_prefix);
  }

  // A file `staged` in the work folder that becomes `target` when the compile has succeeded.
  void stage(std::string staged, std::string target) {
    std::lock_guard lock(m_mutex);
    m_finals.emplace_back(std::move(staged), std::move(target));
  }

  std::vector<std::string> env_list() const;

  // The compiler's own plan: `argv` run with its temporaries in the work folder (TMPDIR), its
  // output kept apart from its diagnostics.
  Expected<ProcessResult> dry_run(const std::vector<std::string>& argv);

  // The words of an options or response file, as sh reads them with its lines joined; the
  // reason (naming `what`) when it cannot be read so.
  static Expected<std::vector<std::string>> options_file_words(const std::string& path, const std::string& what);

  const std::string m_compiler;
  std::vector<std::string> m_args;
  // The driver's own messages (nvcc warning : ..., clang's driver warnings), printed before any
  // step's; once for a command line, so not by a later source's launch of it.
  Printed m_driver;
  bool m_later_source = false;
  bool m_device_link = false;  // nvcc -dlink (Invocation::device_link)
  std::map<std::string, std::string> m_env;  // the plan's environment
  LocalStats m_stats;
  std::optional<v1::StepRequest> m_host_request;  // the host object's look-up, once host_object made it

 private:
  kcache::Client* client();

  std::string m_work_prefix;
  std::mutex m_mutex;  // guards m_finals and m_client's creation
  std::vector<std::pair<std::string, std::string>> m_finals;  // (staged, target)
  std::vector<Printed> m_printed;  // what each task printed, by slot (run_plan)
  std::optional<kcache::Client> m_client;
  std::atomic<bool> m_daemon_down = false;
  std::atomic<bool> m_device_missed = false;  // a device step of this compile missed or ran here
  std::atomic<bool> m_unpublished = false;    // the daemon refused an offer: this client may not publish
  std::atomic<int> m_local_steps = 0;  // step folders made for steps run here
  std::optional<std::optional<Digest>> m_direct_key;  // direct_key(), once computed
  struct Text {
    std::shared_ptr<const std::string> bytes;
    std::int64_t mtime_ns = 0;
    std::optional<Digest> digest;  // text_digest
  };
  std::mutex m_texts_mutex;
  std::map<std::string, Text> m_texts;  // text_of's, by path
  std::chrono::system_clock::time_point m_started = std::chrono::system_clock::now();
};

// The launches: each the compiler's exit code (nvcc.cpp, clang.cpp).
int launch_nvcc(const std::string& nvcc, const std::vector<std::string>& args);
int launch_clang(const std::string& clang, const std::vector<std::string>& args);

}  // namespace kcache::launcher
