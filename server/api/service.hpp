// The kcache.v1.KCache gRPC service: admits each call (tokens and roles), converts its request
// once (wire/wire.hpp), asks the cache core (cache/cache.hpp) or the store's admin operations,
// and maps the answer to a reply or a grpc::Status. Holds references only; the Daemon owns what
// they point to.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "api/auth.hpp"
#include "api/calls.hpp"
#include "cache/cache.hpp"
#include "kcache/v1/kcache.grpc.pb.h"

namespace kcache::server {

struct ServiceLimits {
  std::uint64_t max_message_bytes = (64ULL << 20) + (1ULL << 20);
  std::uint32_t max_lookup_keys = 10000;
  std::size_t fetch_chunk_bytes = 1ULL << 20;
  // Image bytes a Compile reply carries inline; the rest are fetched (streamed), so replies stay
  // under gRPC's default 4 MiB message limit on clients.
  std::size_t inline_reply_bytes = 2ULL << 20;
};

// Lookup takes its request as bytes (raw), so that its key count is checked before a list of
// keys is built (a 59 MB request of 900k keys took 160 MiB to parse before it was refused).
class KCacheService final
    : public v1::KCache::WithRawCallbackMethod_Lookup<v1::KCache::WithCallbackMethod_Fetch<v1::KCache::Service>> {
 public:
  // `auth` decides who may call what (open when it has no tokens); `calls` counts the calls in
  // progress for the drain (shared with the HTTP API). `store`, `pool` and `workers` answer the
  // admin calls and the statistics.
  KCacheService(Cache& cache, Store& store, const JobQueue& pool, const worker::WorkerSet& workers,
                const Authenticator& auth, CallTracker& calls, Metrics& metrics, ServiceLimits limits)
      : m_cache(cache),
        m_store(store),
        m_pool(pool),
        m_workers(workers),
        m_auth(auth),
        m_calls(calls),
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
  grpc::Status Step(grpc::ServerContext* context, const v1::StepRequest* request,
                    v1::StepResponse* response) override;
  grpc::Status ReportUncacheable(grpc::ServerContext* context, const v1::UncacheableReport* request,
                                 v1::UncacheableReply* response) override;

  // The role a KCache method ("Compile") needs; none for a name the service does not define.
  // The handlers' admission and the check on a call's headers (call_gate.hpp) both read it.
  static std::optional<Role> role_needed(std::string_view method);

  // Where the HTTP API listens (0: it does not); GetCapabilities tells clients.
  void set_http_port(int port) { m_http_port = port; }

 private:
  // Admits a call to `method` (with the role role_needed says): a guard that keeps it counted
  // for the drain, or the status to return (shutting down, no or unknown token, a role that
  // falls short; the gate on the headers refuses those first, this names the caller).
  // `client`, if given, gets who was admitted (for the log).
  Expected<CallTracker::Guard> admit(const grpc::ServerContextBase& context, const char* method,
                                     std::string* client = nullptr);
  // Lookup's answer, once its request was admitted and its key count checked.
  Expected<void> lookup(const v1::LookupRequest& request, v1::LookupResponse& response);
  class FetchReactor;

  Cache& m_cache;
  Store& m_store;
  const JobQueue& m_pool;
  const worker::WorkerSet& m_workers;
  const Authenticator& m_auth;
  CallTracker& m_calls;
  Metrics& m_metrics;
  const ServiceLimits m_limits;
  std::atomic<int> m_http_port{0};
};

}  // namespace kcache::server
