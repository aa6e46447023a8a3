// The kcache.v1.KCache gRPC service: validates requests, answers hits from the store, queues
// misses on the worker pool, and maps every failure to a grpc::Status. Holds references only;
// the Daemon owns what they point to.
#pragma once

#include <atomic>
#include <future>
#include <map>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>

#include "compile/compiler.hpp"
#include "metrics.hpp"
#include "remote/tier.hpp"
#include "service/auth.hpp"
#include "kcache/v1/kcache.grpc.pb.h"
#include "store/store.hpp"
#include "worker/worker.hpp"
#include "worker_pool.hpp"

namespace kcache::server {

struct ServiceLimits {
  std::uint64_t max_module_bytes = 64ULL << 20;
  std::uint32_t max_archs = 16;
  std::uint64_t max_message_bytes = (64ULL << 20) + (1ULL << 20);
  std::uint32_t max_lookup_keys = 10000;
  std::size_t fetch_chunk_bytes = 1ULL << 20;
  // Image bytes a Compile reply carries inline; the rest are fetched (streamed), so replies stay
  // under gRPC's default 4 MiB message limit on clients.
  std::size_t inline_reply_bytes = 2ULL << 20;
  std::chrono::seconds job_timeout{600};  // a request waits this long for its compile
  std::uint64_t max_store_bytes = 10ULL << 30;  // --max-size
};

// Request counters for GetStats (the store keeps its own usage numbers).
struct ServiceCounters {
  // hits, misses and coalesced count Compile calls (and cached compiles over HTTP) by outcome;
  // compiles counts compile jobs run on a worker, images_compiled the images they made.
  std::atomic<std::uint64_t> hits{0}, misses{0}, compiles{0}, coalesced{0}, errors{0}, fetches{0}, images_compiled{0};
};

// Counts calls in progress so shutdown can let them finish; refuses new calls once draining.
class CallTracker {
 public:
  class Guard {
   public:
    explicit Guard(CallTracker* t) : m_tracker(t) {}
    Guard(Guard&& o) noexcept : m_tracker(std::exchange(o.m_tracker, nullptr)) {}
    Guard(const Guard&) = delete;
    ~Guard();

   private:
    CallTracker* m_tracker;
  };
  // A guard for a new call, or nullopt once draining.
  std::optional<Guard> enter();
  // Refuses new calls and waits until those in progress finish, or `deadline` passes.
  // Returns the number still running.
  int drain(std::chrono::steady_clock::time_point deadline);

 private:
  std::mutex m_mutex;  // guards m_active and m_draining
  std::condition_variable m_idle;
  int m_active = 0;
  bool m_draining = false;
};

// Lookup takes its request as bytes (raw), so that its key count is checked before a list of
// keys is built (a 59 MB request of 900k keys took 160 MiB to parse before it was refused).
class KCacheService final
    : public v1::KCache::WithRawCallbackMethod_Lookup<v1::KCache::WithCallbackMethod_Fetch<v1::KCache::Service>> {
 public:
  // `compiler` checks requests and describes the toolchain; compiles run on `workers`, one job
  // per `pool` thread.
  // `auth` decides who may call what (open when it has no tokens).
  KCacheService(Store& store, const Compiler& compiler, WorkerPool& pool, worker::WorkerSet& workers,
                const Authenticator& auth, Metrics& metrics, ServiceLimits limits)
      : m_store(store),
        m_compiler(compiler),
        m_pool(pool),
        m_workers(workers),
        m_auth(auth),
        m_metrics(metrics),
        m_limits(limits) {}

  // Every counter: what GetStats answers and /metrics shows.
  v1::Stats snapshot() const;

  grpc::Status Compile(grpc::ServerContext* context, const v1::CompileRequest* request,
                       v1::CompileResponse* response) override;
  grpc::ServerWriteReactor<v1::FetchResponse>* Fetch(grpc::CallbackServerContext* context,
                                                     const v1::FetchRequest* request) override;
  grpc::ServerUnaryReactor* Lookup(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::Status GetCapabilities(grpc::ServerContext* context, const v1::GetCapabilitiesRequest* request,
                               v1::Capabilities* response) override;
  grpc::Status GetStats(grpc::ServerContext* context, const v1::GetStatsRequest* request,
                        v1::Stats* response) override;
  grpc::Status Verify(grpc::ServerContext* context, const v1::VerifyRequest* request,
                      v1::VerifyResponse* response) override;
  grpc::Status Evict(grpc::ServerContext* context, const v1::EvictRequest* request,
                     v1::EvictResponse* response) override;
  grpc::Status Purge(grpc::ServerContext* context, const v1::PurgeRequest* request,
                     v1::PurgeResponse* response) override;

  // The role a KCache method ("Compile") needs; none for a name the service does not define.
  // The handlers' admission and the check on a call's headers (call_gate.hpp) both read it.
  static std::optional<Role> role_needed(std::string_view method);

  // For the HTTP API: whether a call carrying `authorization` ("Bearer TOKEN" or empty) from
  // `peer` may read, as for a gRPC call.
  Expected<void> authorize_read(std::string_view authorization, const std::string& peer, const char* method) const {
    return m_auth.check(authorization, peer, Role::read, method);
  }
  // How an exact image read over HTTP counts: a plain read is a fetch; the images of a cached
  // compile (the CLI's fast path) are not, and the last of them makes that compile a hit.
  enum class ReadFor { fetch, compile_part, compile_last };
  // Exactly the image `which` of (side, key), for the HTTP API (authorize first).
  // With Reach::memory (an event thread's first try) WOULD_BLOCK, counting nothing, where the
  // answer needs RocksDB's files or the remote tier; the caller asks again with Reach::anywhere.
  using Reach = Store::Reach;
  Expected<std::shared_ptr<const Image>> read_image(Side side, std::string_view key_hex, const ImageRequest& which,
                                                    ReadFor purpose = ReadFor::fetch, Reach reach = Reach::anywhere);
  // The image a Fetch asks for, by CUDA's selection rules (kcache/select.hpp).
  struct FetchedImage {
    std::shared_ptr<const Image> image;
    bool needs_jit = false;
  };
  // Fetch's choice for the HTTP API (authorize first); counted as a fetch, failures logged.
  Expected<FetchedImage> select_image(const v1::FetchRequest& request, Reach reach = Reach::anywhere);

  // The toolchain fingerprint (hex) every key includes, for callers that compute keys.
  std::string fingerprint_hex() const { return to_hex(m_compiler.toolchain().fingerprint); }
  // The shared remote tier, asked after the local store and before compiling; null: none. Set
  // before serving; the Daemon owns it.
  void set_remote(remote::RemoteTier* remote) { m_remote = remote; }

  // Where the HTTP API listens (0: it does not); GetCapabilities tells clients.
  void set_http_port(int port) { m_http_port = port; }

  // Refuses new calls (UNAVAILABLE) and waits for calls in progress; see CallTracker::drain.
  int drain(std::chrono::steady_clock::time_point deadline) { return m_calls.drain(deadline); }

 private:
  // Admits a call to `method` (with the role role_needed says): a guard that keeps it counted
  // for the drain, or the status to return (shutting down, no or unknown token, a role that
  // falls short; the gate on the headers refuses those first, this names the caller).
  // `client`, if given, gets who was admitted (for the log).
  Expected<CallTracker::Guard> admit(const grpc::ServerContextBase& context, const char* method,
                                     std::string* client = nullptr);

  // Admits a call already authorized (the HTTP API checks tokens itself): the drain's guard, or
  // UNAVAILABLE once shutting down.
  Expected<CallTracker::Guard> enter();
  // Fetch's choice (find_image), counted as a fetch, a failure counted and logged.
  Expected<FetchedImage> fetch_image(const v1::FetchRequest& request, Reach reach = Reach::anywhere);
  Expected<FetchedImage> find_image(const v1::FetchRequest& request, Reach reach);
  // Counts and logs a failed fetch of `key`; `what` names the image asked for.
  void fetch_failed(std::string_view key, std::string_view what, const Error& error);
  class FetchReactor;

  // The body of Compile; returns the outcome or the error, which Compile counts and logs.
  Expected<v1::Outcome> compile(const v1::CompileRequest& request, v1::CompileResponse& response,
                                std::string& key_hex, bool retried = false);
  // How compile_and_store answered: compiled here, by waiting for an identical compile in this
  // daemon, or from the remote tier (another daemon's compile).
  enum class Answer { compiled, coalesced, remote };
  // Compiles the missing images on the pool and stores them from there, so a compile that
  // outlives the caller's wait still lands in the cache. Waits up to the job timeout.
  // Identical concurrent requests share one compile. With a remote tier, the first of them
  // looks there first and takes the fleet's lease on the compile (fleet_turn).
  Expected<CompileOutput> compile_and_store(const JobSpec& spec, const Key& key,
                                            const std::vector<std::string_view>& modules,
                                            const std::vector<std::pair<std::string_view, std::string_view>>& headers,
                                            std::vector<ImageRequest> missing, Answer& answer);
  // Whether every one of `images` of (side, key) is in the store now.
  bool all_stored(Side side, const Key& key, const std::vector<ImageRequest>& images);

  // What the remote tier had for (side, key): `wanted` (or, without it, any image) now in the
  // local store, verified; not there; or Redis could not be asked. Does not count hit or miss.
  enum class Pull { hit, miss, unavailable };
  Pull pull_remote(Side side, const Key& key, const std::vector<ImageRequest>* wanted);
  // pull_remote for a read (Fetch, Lookup, the HTTP API) of a key the local store lacks, counted.
  bool read_through(Side side, const Key& key, const std::vector<ImageRequest>* wanted);
  // Lookup's answer, once its request was admitted and its key count checked.
  Expected<void> lookup(const v1::LookupRequest& request, v1::LookupResponse& response);
  // Before this daemon compiles `flight`: the remote's entry (pulled), or the fleet's lease on
  // the compile, or neither (compile without one: Redis is unavailable, the tier is read-only,
  // or the holder did not finish by `deadline`). Waits while another daemon holds the lease.
  struct FleetTurn {
    bool pulled = false;
    std::optional<remote::RemoteTier::Lease> lease;
  };
  FleetTurn fleet_turn(Side side, const Key& key, const std::string& flight, const std::vector<ImageRequest>& missing,
                       std::chrono::steady_clock::time_point deadline);
  // Store::get, timed into the hot or local tier's histogram.
  Expected<std::shared_ptr<const Image>> get_image(Side side, const Key& key, const ImageRequest& which,
                                                   Reach reach = Reach::anywhere);

  Store& m_store;
  const Compiler& m_compiler;
  WorkerPool& m_pool;
  worker::WorkerSet& m_workers;
  const Authenticator& m_auth;
  Metrics& m_metrics;
  const ServiceLimits m_limits;
  ServiceCounters m_counters;
  CallTracker m_calls;
  std::atomic<int> m_http_port{0};
  remote::RemoteTier* m_remote = nullptr;
  std::mutex m_in_flight_mutex;  // guards m_in_flight
  std::map<std::string, std::shared_future<Expected<CompileOutput>>> m_in_flight;  // by side/key/images
};

}  // namespace kcache::server
