// libkcache: the C++ client of kcached. Every call has a deadline and returns Expected<T>; an
// unreachable daemon is UNAVAILABLE with a message naming its address.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/expected.hpp"
#include "kcache/key.hpp"
#include "kcache/v1/kcache.grpc.pb.h"

namespace kcache {

class HttpConnection;  // client/src/http_get.hpp

struct ClientOptions {
  ClientOptions(std::string server_address = {}, std::chrono::milliseconds call_deadline = std::chrono::minutes(10))
      : server(std::move(server_address)), deadline(call_deadline) {}

  std::string server;  // HOST:PORT
  std::chrono::milliseconds deadline;  // per call; compiles can be slow
  // compile, fetch and fetch_or_compile make a call that finds the daemon UNAVAILABLE this many
  // times in all, on a fresh channel each time, backing off from 50 ms, doubling, up to 1 s
  // between tries (about 4.5 s with 8 attempts), and never past the call's deadline. Both calls
  // are safe to repeat: a key names its result. A connection can fail now and then even to a
  // daemon that is up (a stampede of clients connecting at once on loopback saw it), and a daemon
  // restarted by its supervisor comes back.
  int max_attempts = 8;
  // TLS: set tls to use it; tls_ca_file verifies the server (empty: the system's roots);
  // tls_cert_file and tls_key_file present a client certificate (mutual TLS).
  bool tls = false;
  std::string tls_ca_file, tls_cert_file, tls_key_file;
  std::string token;  // sent as "authorization: Bearer TOKEN" on every call when set
  // fetch() reads over the daemon's HTTP image API when it has one (GetCapabilities says) and
  // TLS is off: one plain GET on a kept-alive connection instead of a gRPC stream. Any trouble
  // there falls back to gRPC.
  bool http_fetch = true;
};

struct FetchedImage {
  v1::Image image;  // metadata, needs_jit
  std::string data;
};

class Client {
 public:
  explicit Client(ClientOptions options);
  ~Client();

  const std::string& server() const { return m_options.server; }

  // The daemon's capabilities, fetched once and cached; refresh=true asks again.
  Expected<v1::Capabilities> capabilities(bool refresh = false);

  // The key the daemon will give `request`, computed here with the daemon's toolchain
  // fingerprint (one GetCapabilities the first time, nothing after).
  Expected<Key> compute_key(const v1::CompileRequest& request);

  // Compiles (or hits); every image comes back with its bytes unless digests_only, large ones
  // streamed through Fetch. Retried while the daemon is UNAVAILABLE (max_attempts).
  Expected<v1::CompileResponse> compile(const v1::CompileRequest& request);
  // Fetches the best image for the request's arch, checking the bytes against the digest: over
  // HTTP where the daemon serves it (ClientOptions::http_fetch), else reassembling Fetch's
  // streamed chunks. Retried while the daemon is UNAVAILABLE (max_attempts).
  Expected<FetchedImage> fetch(const v1::FetchRequest& request);
  Expected<v1::LookupResponse> lookup(const v1::LookupRequest& request);

  // The load-time call: computes the key locally and fetches the best image for `device_arch`
  // (one round trip, no upload); on a miss, compiles `request` (with `device_arch` added to its
  // archs) and fetches. Retries with backoff while the daemon is UNAVAILABLE. A key the daemon
  // computes differently (its toolchain changed) refreshes the cached capabilities.
  Expected<FetchedImage> fetch_or_compile(const v1::CompileRequest& request, const std::string& device_arch);

  // Calls retried after UNAVAILABLE so far (for tests and diagnostics).
  std::uint64_t retries() const { return m_retries; }
  Expected<v1::Stats> stats();
  // A build step (the compiler launcher's): one call, no retries; the launcher runs the step
  // itself when the daemon cannot.
  Expected<v1::StepResponse> step(const v1::StepRequest& request);
  // Counts a compile the launcher ran without the cache, by reason.
  Expected<void> report_uncacheable(std::string_view reason);

  // The standard gRPC health check (grpc.health.v1; no token needed): OK when the daemon is
  // SERVING, UNAVAILABLE when it is not (draining) or cannot be reached.
  Expected<void> health();

  // Admin calls (the admin role when the daemon checks tokens).
  Expected<v1::VerifyResponse> verify(bool repair);
  Expected<v1::EvictResponse> evict(const v1::EvictRequest& request);
  Expected<v1::PurgeResponse> purge();

 private:
  Expected<v1::CompileResponse> compile_once(const v1::CompileRequest& request);
  Expected<FetchedImage> fetch_once(const v1::FetchRequest& request);
  std::unique_ptr<grpc::ClientContext> context() const;
  void reconnect();
  std::shared_ptr<v1::KCache::Stub> stub() const;
  Error error(const grpc::Status& status) const;

  // Runs `call` until it succeeds, fails with something other than UNAVAILABLE, or the
  // attempts are spent.
  template <typename Call>
  auto with_retries(Call call) -> decltype(call());

  // The HTTP fetch: nullopt when it cannot be used now (no HTTP API, TLS, a transport failure),
  // so the caller goes through gRPC.
  std::optional<Expected<FetchedImage>> fetch_over_http(const v1::FetchRequest& request);

  ClientOptions m_options;
  std::mutex m_http_mutex;  // guards m_http_idle
  std::vector<HttpConnection> m_http_idle;  // kept-alive connections to the HTTP API, one per concurrent fetch
  std::atomic<std::uint64_t> m_retries{0};
  mutable std::mutex m_stub_mutex;  // guards m_stub and m_channel, replaced by reconnect()
  std::shared_ptr<v1::KCache::Stub> m_stub;
  std::shared_ptr<grpc::Channel> m_channel;
  std::mutex m_capabilities_mutex;  // guards m_capabilities
  std::optional<v1::Capabilities> m_capabilities;
};

}  // namespace kcache
