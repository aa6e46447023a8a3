// The cache core: what every front end (the gRPC service, the HTTP image API) asks, in the
// project's own types (kcache/ask.hpp), with no protocol in it. It owns the tiers in their order:
//
//   hot memory cache -> local store (RocksDB) -> remote tier (Redis, optional) -> compile
//
// (the first two are the Store's), the table that lets identical requests share one compile,
// the driver-aware choice of an image, and the counters GetStats and /metrics report. One verb
// per operation: lookup, select, read, compile. Holds references only; the Daemon owns what they
// point to.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cache/activity.hpp"
#include "compile/compiler.hpp"
#include "compile/tool_step.hpp"
#include "kcache/ask.hpp"
#include "kcache/key.hpp"
#include "metrics.hpp"
#include "remote/tier.hpp"
#include "store/store.hpp"
#include "worker/worker.hpp"
#include "worker/job_queue.hpp"

namespace kcache::server {

// Beyond a job's or a step's deadline, time for its worker to report the overrun itself.
inline constexpr auto k_deadline_slack = std::chrono::seconds(5);

struct CacheLimits {
  std::uint64_t max_module_bytes = 64ULL << 20;  // --max-module-size
  std::uint32_t max_archs = 16;                  // --max-archs
  std::chrono::seconds job_timeout{600};         // a request waits this long for its compile
};

// Request counters (the store keeps its own usage numbers, the remote tier its own).
struct CacheCounters {
  // hits, misses and coalesced count compiles asked for (over gRPC, and cached compiles over
  // HTTP) by outcome; compiles counts compile jobs run on a worker, images_compiled the images
  // they made.
  std::atomic<std::uint64_t> hits{0}, misses{0}, compiles{0}, coalesced{0}, errors{0}, fetches{0}, images_compiled{0};
};

// One image of a compile's answer: its metadata, and its bytes where they fit the ask's inline
// budget (empty otherwise: the client fetches them).
struct AnsweredImage {
  ImageMeta meta;
  std::string data;
  bool needs_jit = false;  // PTX in place of a cubin the client's driver cannot load
};

struct CompileAnswer {
  Key key;
  // hit: every image was stored (here or in the fleet); miss: this request compiled; coalesced:
  // it waited for an identical compile already running here.
  Outcome outcome = Outcome::hit;
  std::vector<AnsweredImage> images;  // one per CompileAsk::images, in order
  std::vector<std::string> diagnostics;
};

// A build step's answer: the tool's exit code and what it printed, and its outputs when it
// succeeded (a host step that looks and finds nothing: outcome miss, no outputs).
struct StepAnswer {
  Key key;
  Outcome outcome = Outcome::hit;
  int exit_code = 0;
  std::vector<std::pair<std::string, std::string>> outputs;  // (name, bytes) in the ask's order
  std::string stdout_text, stderr_text;
};

// What the build steps of one tool came to since start.
struct StepCounters {
  std::atomic<std::uint64_t> hits{0}, misses{0}, coalesced{0}, stored{0}, failed{0};
};

// The image Select chose, and whether the driver must JIT it.
struct SelectedImage {
  std::shared_ptr<const Image> image;
  bool needs_jit = false;
};

class Cache {
 public:
  using Reach = Store::Reach;

  Cache(Store& store, const Compiler& compiler, JobQueue& pool, worker::WorkerSet& workers, Metrics& metrics,
        CacheLimits limits)
      : m_store(store), m_compiler(compiler), m_pool(pool), m_workers(workers), m_metrics(metrics), m_limits(limits) {}

  // The shared remote tier, asked after the local store and before compiling; null: none. Set
  // before serving; the Daemon owns it.
  void set_remote(remote::RemoteTier* remote) { m_remote = remote; }

  // How the workers run tools on peers' bytes (compile/jail.hpp): mode "bwrap" or "none" with
  // the reason. Without a jail, build steps are refused unless `unjailed_steps`. Set before serving.
  struct JailState {
    std::string mode = "none";
    std::string reason = "not set up";
    bool unjailed_steps = false;
  };
  void set_jail(JailState jail) { m_jail = std::move(jail); }
  const JailState& jail() const { return m_jail; }
  remote::RemoteTier* remote() const { return m_remote; }

  // The images `ask` names, from the first tier that has them; the missing ones are compiled on
  // the pool (one compile per identical request, and per key across a fleet) and stored. Counted
  // and logged as one compile request. A driver too old for this toolkit's cubins gets PTX in their place (KEY_FORMAT.md,
  // tag 12).
  Expected<CompileAnswer> compile(const CompileAsk& ask);
  // A compile request its front end refused before asking (a malformed request): counted and
  // logged as the compile errors are.
  void refused(std::string_view side, const std::vector<std::string>& archs, std::chrono::steady_clock::time_point start,
               const Error& error);

  // A build step (server/cache/steps.cpp): its stored outputs, or the tools run on the pool
  // (once per key, here and across a fleet) and stored when they succeed. A device step runs
  // only where this daemon's tool has the ask's identity (FAILED_PRECONDITION otherwise); a
  // host step is only looked up, or stores the object it offers once the host wall has checked
  // it. Counted per tool, and logged.
  Expected<StepAnswer> step(const StepAsk& ask);
  const StepCounters& step_counters(StepTool tool) const { return m_step_counters[static_cast<std::size_t>(tool) - 1]; }
  // A compile a launcher ran without the cache, counted by its reason: printable ASCII up to 64
  // bytes, at most 64 reasons; anything else counts as "other".
  void count_uncacheable(std::string_view reason);
  std::map<std::string, std::uint64_t> uncacheable() const;

  // The metadata of every image of (side, key), reading through to the remote tier; empty when
  // no tier has the key.
  Expected<std::vector<ImageMeta>> lookup(Side side, const Key& key);

  // The image of `ask.key` that `ask.arch` runs best (kcache/select.hpp), passing over what the
  // client's driver cannot load; counted as a fetch, a failure logged. With Reach::memory (an
  // event thread's first try): WOULD_BLOCK, counting nothing, where the answer needs RocksDB's
  // files or the remote tier; the caller asks again with Reach::anywhere.
  Expected<SelectedImage> select(const SelectAsk& ask, Reach reach = Reach::anywhere);

  // How an exact read counts: a plain read is a fetch; the images of a cached compile (the CLI's
  // fast path) are not, and the last of them makes that compile a hit.
  enum class ReadFor { fetch, compile_part, compile_last };
  // Exactly image `which` of (side, key), reading through to the remote tier; Reach as for select.
  Expected<std::shared_ptr<const Image>> read(Side side, std::string_view key_hex, const ImageRequest& which,
                                              ReadFor purpose = ReadFor::fetch, Reach reach = Reach::anywhere);

  // Counts and logs a failed fetch of `key` (a front end's, when its stream breaks); `what`
  // names the image asked for.
  void fetch_failed(std::string_view key, std::string_view what, const Error& error);
  // A fetch its front end refused before asking (a malformed request): counted as a fetch that
  // failed, and logged.
  void refused_fetch(std::string_view key, std::string_view what, const Error& error);

  const CacheCounters& counters() const { return m_counters; }
  // The newest compiles and errors, and this interval's compile times (the status page's).
  Activity& activity() { return m_activity; }
  const Activity& activity() const { return m_activity; }
  const CacheLimits& limits() const { return m_limits; }
  const Toolchain& toolchain() const { return m_compiler.toolchain(); }

 private:
  // How the missing images were answered: compiled here, by waiting for an identical compile in
  // this daemon, or from the remote tier (another daemon's compile).
  enum class Answer { compiled, coalesced, remote };
  // The body of compile; `key_hex` gets the key once it is known (for the log).
  Expected<CompileAnswer> answer(const CompileAsk& ask, bool retried, std::string& key_hex);
  // The in-flight protocol compiles and build steps share (run_once.cpp): the work for `wanted`
  // of (side, key) runs once on the pool and is stored from there, so a run that outlives the
  // caller's wait still lands in the cache; identical concurrent requests wait for it
  // (coalesced); with a remote tier, the first of them looks there first and takes the fleet's
  // lease. Waits up to the job timeout. What differs between a compile and a step is `Work`:
  template <class Result>
  struct Work {
    const char* what = "compile";  // for the deadline's message
    std::size_t parts = 1;         // run at once, each on a pool thread and its own worker
    // A part's CPUs while no job waits in the queue (one otherwise): the split's own budget.
    std::size_t cpus_when_idle = 1;
    std::function<Expected<Result>(std::size_t part, const std::vector<unsigned>& cpus)> run;
    std::function<Expected<Result>(std::vector<Expected<Result>> parts)> merge;  // called once, all parts done
    // The entry a result is stored as; nullopt when it stores none (a step whose tool failed).
    std::function<std::optional<std::pair<EntryRecord, std::vector<Image>>>(const Result&)> entry;
    // A result with an entry, before it is stored, and the run's seconds (counters, activity).
    std::function<void(Result&, const std::vector<Image>&, double seconds)> ran;
    // A result too large for the cache: kept from the caller's answer only (and not written to
    // the fleet); `why` says so.
    std::function<void(Result&, const Error& why)> too_large;
  };
  template <class Result>
  struct InFlight {
    std::mutex mutex;  // guards flights
    std::map<std::string, std::shared_future<Expected<Result>>> flights;  // by side/key/images
  };
  template <class Result>
  Expected<Result> run_once(InFlight<Result>& table, Side side, const Key& key, const std::vector<ImageRequest>& wanted,
                            Answer& answer, Work<Result> work);
  // Compiles the missing images (run_once, split by arch over idle workers).
  Expected<CompileOutput> compile_and_store(const CompileAsk& ask, const JobSpec& spec, const Key& key,
                                            std::vector<ImageRequest> missing, Answer& answer);
  // Whether every one of `images` of (side, key) is in the store now.
  bool all_stored(Side side, const Key& key, const std::vector<ImageRequest>& images);
  // The remote tier's entry for (side, key) into the local store, verified, if it has `wanted`
  // (or, without it, any image).
  remote::Pull pull(Side side, const Key& key, const std::vector<ImageRequest>* wanted);
  // pull for a read (select, lookup, read) of a key the local store lacks.
  bool read_through(Side side, const Key& key, const std::vector<ImageRequest>* wanted);
  Expected<SelectedImage> choose(const SelectAsk& ask, Reach reach);
  // Store::get, timed into the hot or local tier's histogram.
  Expected<std::shared_ptr<const Image>> get_image(Side side, const Key& key, const ImageRequest& which,
                                                   Reach reach = Reach::anywhere);

  Expected<StepAnswer> answer_step(const StepAsk& ask, std::string& key_hex);
  // A host step that was only looked up (a miss), or whose object a publish client offers:
  // the offer is checked by the host wall and kept.
  Expected<StepAnswer> keep_offered(const StepAsk& ask, StepAnswer out);
  // The stored outputs of a step (read through to the remote tier); nullopt when any is missing.
  std::optional<StepAnswer> stored_step(Side side, const Key& key, const std::vector<std::string>& outputs);
  // Runs a step once per key (run_once) and stores what a successful run wrote; `program` is a
  // host step's compiler.
  Expected<StepRun> run_step_once(const StepAsk& ask, const Key& key, Answer& answer,
                                  const std::filesystem::path& program = {});
  // This daemon's identity of a device step's tool, computed once.
  Expected<Digest> step_tool(StepTool tool);
  // This machine's host compiler driver of that identity (kcache::host_compiler_identity), from
  // those on PATH's usual folders, each named once, when first asked; FAILED_PRECONDITION if none.
  Expected<std::filesystem::path> host_compiler(const Digest& identity);
  // Starts naming them in the background (about 0.4 s of hashing cc1plus and asking each driver),
  // at a build's first step: its host compile comes after its device steps.
  void scan_host_compilers_soon();
  void scan_host_compilers();  // under m_host_compilers_mutex
  // Why build steps may not run here (no jail, and not allowed without one); empty when they may.
  std::string steps_refused() const;

  Store& m_store;
  const Compiler& m_compiler;
  JobQueue& m_pool;
  worker::WorkerSet& m_workers;
  Metrics& m_metrics;
  const CacheLimits m_limits;
  CacheCounters m_counters;
  Activity m_activity;
  JailState m_jail;
  remote::RemoteTier* m_remote = nullptr;
  InFlight<CompileOutput> m_compiles_in_flight;
  InFlight<StepRun> m_steps_in_flight;
  std::array<StepCounters, k_step_tool_count> m_step_counters;  // by StepTool - 1
  std::mutex m_step_tool_mutex;                 // guards m_step_tools
  std::map<StepTool, Expected<Digest>> m_step_tools;
  std::mutex m_host_compilers_mutex;  // guards m_host_compilers and m_host_compilers_scan
  std::optional<std::map<Digest, std::filesystem::path>> m_host_compilers;  // by identity, once scanned
  std::future<void> m_host_compilers_scan;  // started by the first step, so the host step finds it done
  mutable std::mutex m_uncacheable_mutex;  // guards m_uncacheable
  std::map<std::string, std::uint64_t> m_uncacheable;
};

}  // namespace kcache::server
