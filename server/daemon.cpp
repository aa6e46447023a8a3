#include "daemon.hpp"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/resource_quota.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <future>
#include <iterator>
#include <sstream>
#include <thread>

#include "compile/compiler.hpp"
#include "compile/object_check.hpp"
#include "net/http.hpp"
#include "net/http_request.hpp"
#include "metrics.hpp"
#include "net/admission.hpp"
#include "net/grpc_gate.hpp"
#include "api/http_api.hpp"
#include "api/auth.hpp"
#include "api/call_gate.hpp"
#include "api/service.hpp"
#include "api/status_page.hpp"
#include "cache/cache.hpp"
#include "remote/tier.hpp"
#include "store/store.hpp"
#include "worker/worker.hpp"
#include "worker/job_queue.hpp"

namespace kcache::server {
namespace {

// The names an HTTP listener answers besides its addresses and localhost (net/http_request.hpp,
// Router::allow_hosts): the machine's own name and --http-host's.
std::vector<std::string> served_host_names(const Config& config) {
  std::vector<std::string> names = config.http_hosts;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0 && name[0] != '\0') names.emplace_back(name);
  return names;
}

constexpr auto k_shutdown_grace = std::chrono::seconds(30);
constexpr auto k_reply_flush_grace = std::chrono::milliseconds(500);
// For the replies of the calls the drain waited for to leave gRPC, before its shutdown.
constexpr auto k_reply_send_grace = std::chrono::seconds(10);
constexpr auto k_grpc_teardown_grace = std::chrono::milliseconds(1000);
// For the gate to pass on gRPC's last replies (past its own 1 s per closing connection).
constexpr auto k_gate_drain_grace = std::chrono::milliseconds(1500);
// How long shutdown waits for queued remote writes.
constexpr auto k_remote_flush_grace = std::chrono::seconds(2);
constexpr std::size_t k_min_grpc_memory = 128ULL << 20;  // gRPC's buffers, at least (ResourceQuota)
constexpr int k_max_streams_per_connection = 128;
constexpr auto k_max_connection_age = std::chrono::hours(2);
constexpr auto k_max_connection_age_grace = std::chrono::minutes(15);  // a compile may take minutes
constexpr auto k_keepalive_time = std::chrono::minutes(1);
constexpr auto k_keepalive_timeout = std::chrono::seconds(20);

int milliseconds(std::chrono::milliseconds d) { return static_cast<int>(d.count()); }

// The synchronous server's threads: every call a worker runs or the queue holds, fetches and
// lookups beside them, and a whole connection's worth of streams (k_max_streams_per_connection:
// what the gRPC gate lets one connection open before it may be cut) to spare, so that a flood
// the gate cuts takes no thread a well-behaved call needs.
int grpc_threads(const Config& config) {
  std::size_t workers = config.workers > 0 ? config.workers : std::max(1u, std::thread::hardware_concurrency());
  std::size_t queue = config.queue_depth > 0 ? config.queue_depth : 4 * workers;
  return static_cast<int>(std::min<std::size_t>(1024, 2 * (workers + queue) + 2 * k_max_streams_per_connection));
}

// libgrpc++_reflection registers its plugin for every server as soon as it is loaded; this takes
// it out of a builder again.
class WithoutReflection final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    std::erase_if(*plugins, [](const auto& p) { return p->name().find("reflection") != std::string::npos; });
  }
};

// Whether `listen` (HOST:PORT) is a loopback address; anything unparsable is not.
bool is_loopback(const std::string& listen) {
  auto address = parse_listen_address(listen, "");
  return address && is_loopback_host(address->host);
}

// A one-line secret file (a password): its bytes less a trailing newline.
Expected<std::string> read_secret_line(const std::filesystem::path& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  if (!in.good() && !in.eof()) return make_error(ErrorCode::k_failed_precondition, "cannot read " + path.string() + " (" + flag + ")");
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (text.empty() || text.size() > 4096 || text.find('\n') != std::string::npos) {
    return make_error(ErrorCode::k_failed_precondition,
                      path.string() + " (" + flag + ") must hold one line: the password, 1 to 4096 bytes");
  }
  return text;
}

// The remote tier of `config` (--remote and its files); null without --remote.
Expected<std::unique_ptr<remote::RemoteTier>> open_remote(const Config& config, const Toolchain& toolchain) {
  if (config.remote.empty()) return std::unique_ptr<remote::RemoteTier>();
  auto redis = remote::parse_redis_url(config.remote);
  if (!redis) return redis.error();
  redis->connect_timeout = std::chrono::milliseconds(config.remote_connect_timeout_ms);
  redis->operation_timeout = std::chrono::milliseconds(config.remote_timeout_ms);
  if (!config.remote_password_file.empty()) {
    auto password = read_secret_line(config.remote_password_file, "--remote-password-file");
    if (!password) return password.error();
    redis->password = std::move(*password);
  }
  auto secret = remote::FleetSecret::read(config.remote_secret_file);
  if (!secret) return secret.error();
  remote::RemoteOptions options;
  options.url = config.remote;
  options.redis = std::move(*redis);
  options.read_only = config.remote_read_only;
  options.write_queue_bytes = config.remote_write_queue_size;
  options.max_module_bytes = config.max_module_size;
  options.read_budget_bytes = config.remote_read_budget;
  options.lease_ttl = std::chrono::milliseconds(config.remote_lease_ms);
  return std::make_unique<remote::RemoteTier>(std::move(options), std::move(*secret), toolchain.fingerprint);
}

// The TLS files (mutual with a client CA) when a certificate is given; none (plaintext)
// otherwise, which must be asked for on any address but loopback.
Expected<net::TlsFiles> tls_files(const Config& config) {
  if (config.tls_cert.empty()) {
    if (!is_loopback(config.listen) && !config.plaintext) {
      return make_error(ErrorCode::k_failed_precondition,
                        "refusing to serve " + config.listen + " without TLS: give --tls-cert and --tls-key, or "
                        "--plaintext to accept that anyone on the network can read and send traffic");
    }
    if (!is_loopback(config.listen)) {
      spdlog::warn("serving {} in plaintext (--plaintext): traffic and tokens travel unencrypted", config.listen);
    }
    return net::TlsFiles{};
  }
  return net::TlsFiles{config.tls_cert.string(), config.tls_key.string(), config.tls_client_ca.string()};
}

// Descriptors kcached keeps for itself, beyond its listeners' connections: the store's files, two
// pipes per worker, Redis, logs and the toolchain's processes.
std::size_t reserved_descriptors(const Config& config) { return 96 + 4 * std::max<std::size_t>(config.workers, 4); }

}  // namespace

Expected<std::unique_ptr<Daemon>> Daemon::start(const Config& config) {
  std::unique_ptr<Daemon> d(new Daemon());
  auto tls = tls_files(config);
  if (!tls) return tls.error();
  auto listen = parse_listen_address(config.listen, "--listen");
  if (!listen) return listen.error();
  d->m_fds = std::make_unique<net::FdBudget>(net::FdBudget::for_this_process(reserved_descriptors(config)));
  spdlog::debug("connections may hold {} file descriptors", d->m_fds->limit());
  d->m_metrics = std::make_unique<Metrics>();
  d->m_auth = std::make_unique<Authenticator>();
  if (!config.tokens_file.empty()) {
    auto auth = Authenticator::load(config.tokens_file);
    if (!auth) return auth.error();
    *d->m_auth = std::move(*auth);
  }
  StoreOptions store_options{config.db, check_host_object, config.max_size};
  store_options.hot_cache_bytes = config.hot_cache_size;
  auto store = Store::open(store_options);
  if (!store) return store.error();
  d->m_store = std::move(*store);

  CubinAssembler assembler = config.cubin_assembler == "ptxas"       ? CubinAssembler::ptxas
                             : config.cubin_assembler == "nvjitlink" ? CubinAssembler::nvjitlink
                                                                     : CubinAssembler::automatic;
  // The workers compile; the daemon only describes the toolchain, and learns the assembler from
  // its first worker rather than keep nvJitLink mapped (ToolkitLibraries). What ptxas and ld.lld
  // answered goes to the workers, which run them again only where their files changed (ToolRuns).
  ToolRuns runs;
  Toolchain detected =
      detect_toolchain(config.cuda_root, assembler, ToolkitLibraries::by_workers, config.rocm_device_libs, &runs);
  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return make_error(ErrorCode::k_internal, "cannot find kcached's own executable: " + ec.message());
  // Tools run on peers' bytes only in a jail that works here (compile/jail.hpp), asked once.
  Jail jail = config.jail == "none" ? Jail::none("started with --jail none")
                                    : Jail::probe(jail_policy(detected, config.worker_memory));
  if (jail.mode() == Jail::Mode::none) {
    spdlog::warn("no jail for the tools run on peers' bytes: {}. {}", jail.reason(),
                 config.allow_unjailed_steps
                     ? "Build steps run anyway (--allow-unjailed-steps): a client with the compile role can run code as "
                       "this user"
                     : "Build steps are refused (--allow-unjailed-steps runs them anyway)");
  } else {
    spdlog::info("jail: bwrap, for every tool run on peers' bytes (build steps, ptxas, nvlink, ld.lld)");
  }
  worker::WorkerConfig worker_config{config.cuda_root, config.rocm_device_libs, config.cubin_assembler, config.log_level,
                                     config.worker_memory, runs.runs(), std::string(jail.mode_name())};
  d->m_workers = std::make_unique<worker::WorkerSet>(self, worker_config);
  auto report = d->m_workers->start(config.workers);
  if (!report) return report.error();
  if (assembler_by_workers(detected, assembler)) detected.nvjitlink_version = report->nvjitlink_version;
  if (detected.cuda_present) detected.nvrtc_version = report->nvrtc_version;
  detected.fingerprint = toolchain_fingerprint(detected);
  if (report->fingerprint_hex != to_hex(detected.fingerprint)) {
    return make_error(ErrorCode::k_failed_precondition,
                      "the compile workers detected toolchain " + report->fingerprint_hex.substr(0, 16) +
                          ", kcached " + to_hex(detected.fingerprint).substr(0, 16) +
                          ": the toolkit changed while kcached started; start it again");
  }
  if (assembler == CubinAssembler::nvjitlink && detected.nvjitlink_version.empty()) {
    return make_error(ErrorCode::k_failed_precondition,
                      "--cubin-assembler nvjitlink: no usable libnvJitLink.so under " + config.cuda_root.string() + "/lib64");
  }
  d->m_compiler = std::make_unique<Compiler>(std::move(detected));
  const Toolchain& t = d->m_compiler->toolchain();
  spdlog::info("toolchain: LLVM {}, {} device archs ({}..{}), CUDA {}, cubin by {}, PTX ISA {}, libdevice {}, "
               "fingerprint {:.16}",
               t.llvm_version, t.device_archs.size(), t.device_archs.empty() ? "-" : t.device_archs.front(),
               t.device_archs.empty() ? "-" : t.device_archs.back(),
               t.cuda_present ? t.ptxas_version : "absent (PTX only)", assembler_name(t),
               t.max_ptx_version > 0 ? std::to_string(t.max_ptx_version) : "LLVM's default per arch",
               t.libdevice.empty() ? "absent" : "present", to_hex(t.fingerprint));
  spdlog::info("AMD GPUs: {}; code objects by {}; ROCm device libraries {}",
               t.amdgpu_present ? "LLVM's AMDGPU backend" : "absent (no AMDGPU backend in LLVM)",
               t.lld.empty() ? "nobody (no ld.lld: amdgcn assembly only)" : t.lld.string(),
               t.rocm_device_libs.empty() ? "absent (modules calling hip.bc, ocml or ockl are refused)" : t.rocm_device_libs.string());

  d->m_pool = std::make_unique<JobQueue>(config.workers, config.queue_depth);
  CacheLimits cache_limits;
  cache_limits.max_module_bytes = config.max_module_size;
  cache_limits.max_archs = config.max_archs;
  cache_limits.job_timeout = std::chrono::seconds(config.job_timeout_s);
  d->m_cache = std::make_unique<Cache>(*d->m_store, *d->m_compiler, *d->m_pool, *d->m_workers, *d->m_metrics,
                                       cache_limits);
  d->m_cache->set_jail({std::string(jail.mode_name()), jail.reason(), config.allow_unjailed_steps});
  ServiceLimits limits;
  limits.max_message_bytes = config.max_module_size + (1ULL << 20);  // room for the rest of the request
  d->m_calls = std::make_unique<CallTracker>();
  d->m_service = std::make_unique<KCacheService>(*d->m_cache, *d->m_store, *d->m_pool, *d->m_workers, *d->m_auth,
                                                 *d->m_calls, *d->m_metrics, limits);
  auto remote = open_remote(config, t);
  if (!remote) return remote.error();
  d->m_remote = std::move(*remote);
  if (d->m_remote) {
    d->m_cache->set_remote(d->m_remote.get());
    spdlog::info("remote tier: {}{} (operation timeout {} ms, lease {} ms)", config.remote,
                 config.remote_read_only ? ", read-only" : "", config.remote_timeout_ms, config.remote_lease_ms);
  }

  // The gate owns the port (net/grpc_gate.hpp); gRPC serves it alone, on a private Unix socket.
  net::GateLimits gate_limits;
  gate_limits.max_connections = config.max_connections;
  gate_limits.max_per_peer = config.max_connections_per_peer;
  gate_limits.frame_burst = 2 * k_max_streams_per_connection;  // every stream a connection may hold, reset
  // A request gRPC refuses for its size never reaches the metrics' interceptor: the gate counts it.
  gate_limits.max_message_bytes = std::min<std::uint64_t>(limits.max_message_bytes, INT32_MAX);  // as gRPC takes it
  gate_limits.oversized_message = [metrics = d->m_metrics.get()](std::string_view path) {
    metrics->count_call(path, grpc::StatusCode::RESOURCE_EXHAUSTED);
  };
  auto gate = net::GrpcGate::start(listen->host, listen->port, "--listen", *tls, gate_limits, *d->m_fds);
  if (!gate) return gate.error();
  d->m_gate = std::move(*gate);
  d->m_port = d->m_gate->port();

  grpc::EnableDefaultHealthCheckService(true);
  // Reflection answers without a token (a plugin service, outside KCacheService's admission), so
  // it is served only when asked for.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  if (!config.reflection) builder.SetOption(std::make_unique<WithoutReflection>());
  // With tokens, every call's token and role are checked on its headers, before gRPC reads its
  // message (api/call_gate.hpp); handlers check again to name the caller in the log.
  std::shared_ptr<const CallGate> call_gate;
  if (d->m_auth->enabled()) call_gate = std::make_shared<CallGate>(*d->m_auth, *d->m_metrics, config.reflection);
  int upstream_port = 0;
  builder.AddListeningPort(d->m_gate->upstream_address(), gated_server_credentials(std::move(call_gate)), &upstream_port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<std::uint64_t>(limits.max_message_bytes, INT32_MAX)));
  // What gRPC bounds itself, behind the gate: streams at once per connection (a client queues
  // more until one ends), connections without calls and connections kept too long (GOAWAY; gRPC
  // clients reconnect), peers that stopped answering (keepalive), and the handshake.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, k_max_streams_per_connection);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, static_cast<int>(config.idle_timeout_s * 1000));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, milliseconds(k_max_connection_age));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS, milliseconds(k_max_connection_age_grace));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, milliseconds(k_keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, milliseconds(k_keepalive_timeout));
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS, 5000);
  // gRPC reads a whole request before any handler sees it (callers without the right token are
  // refused on their headers first): 64 concurrent 64 MiB Compiles took kcached to 5.4 GB. The
  // quota bounds what its buffers may hold; past it, gRPC shrinks flow-control windows and
  // cancels streams ("Buffers full", RESOURCE_EXHAUSTED) instead of reading on. Room for two of
  // the largest messages at once. It also caps the synchronous server's threads (one per call in
  // a handler): past the cap a call is refused with RESOURCE_EXHAUSTED rather than given a
  // thread; the rapid-reset flood had made 32,263 of them.
  grpc::ResourceQuota quota("kcached-grpc");
  quota.Resize(std::max<std::size_t>(k_min_grpc_memory, 2 * limits.max_message_bytes));
  quota.SetMaxThreads(grpc_threads(config));
  builder.SetResourceQuota(quota);
  builder.RegisterService(d->m_service.get());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(d->m_metrics->interceptor_factory());
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  d->m_server = builder.BuildAndStart();
  if (!d->m_server || upstream_port == 0) {
    return make_error(ErrorCode::k_unavailable,
                      "cannot listen on " + config.listen + " (address in use, or not an address of this machine?)");
  }
  auto http_listen = http_listen_address(config);
  if (!http_listen) return http_listen.error();
  if (!http_listen->empty()) {
    if (config.tls_cert.empty() && !is_loopback(*http_listen) && !config.plaintext) {
      return make_error(ErrorCode::k_failed_precondition,
                        "refusing to serve images on " + *http_listen + " without TLS: give --tls-cert and "
                        "--tls-key, or --plaintext");
    }
    HttpLimits http_limits;
    http_limits.max_connections = config.max_connections;
    http_limits.max_per_peer = config.max_connections_per_peer;
    const HttpTls& http_tls = *tls;
    d->m_status = std::make_unique<StatusPage>(*d->m_cache, *d->m_pool,
                                               [service = d->m_service.get()] { return service->snapshot(); });
    auto http = HttpListener::start(*http_listen, "--http-listen", http_tls, http_limits, *d->m_fds, [&](Router& server) {
      // Without tokens, any page a browser opens could ask a name that resolves here (DNS rebinding).
      if (!d->m_auth->enabled()) server.allow_hosts(served_host_names(config));
      add_http_api_routes(server, *d->m_cache, *d->m_auth, *d->m_calls, *d->m_metrics);
      d->m_status->add_routes(server, *d->m_auth, *d->m_metrics, http_tls.enabled());
    });
    if (!http) return http.error();
    d->m_http = std::move(*http);
    d->m_service->set_http_port(d->m_http->port());
    auto where = parse_listen_address(*http_listen, "--http-listen");
    spdlog::info("images over {}: {}:{}", http_tls.enabled() ? "HTTPS" : "HTTP", where ? where->host : *http_listen,
                 d->m_http->port());
  }
  if (!config.metrics_listen.empty()) {
    HttpLimits limits;
    limits.threads = 2;  // one scraper, now and then
    limits.max_connections = 64;
    // One event thread holds every connection, so a scraper always finds one waiting to take the
    // place of (HttpLimits::max_connections).
    limits.event_threads = 1;
    auto metrics = HttpListener::start(config.metrics_listen, "--metrics-listen", HttpTls{}, limits, *d->m_fds,
                                       [&](Router& server) {
      server.allow_hosts(served_host_names(config));  // no token is ever asked there
      add_metrics_route(server, [service = d->m_service.get()] { return service->snapshot(); });
    });
    if (!metrics) return metrics.error();
    d->m_metrics_server = std::move(*metrics);
    auto where = parse_listen_address(config.metrics_listen, "--metrics-listen");
    spdlog::info("metrics: http://{}:{}/metrics", where ? where->host : config.metrics_listen, d->m_metrics_server->port());
  }
  spdlog::info("{}, {}", config.tls_cert.empty() ? "plaintext" : config.tls_client_ca.empty() ? "TLS" : "mutual TLS",
               d->m_auth->enabled() ? std::to_string(d->m_auth->clients()) + " token clients" : "no authentication");
  spdlog::info("serving {} (port {}), db {}, {} compile workers (memory limit {}), queue {}", config.listen,
               d->m_port, config.db.string(), config.workers,
               config.worker_memory > 0 ? std::to_string(config.worker_memory) + " bytes" : "none",
               config.queue_depth);
  return d;
}

Daemon::~Daemon() {
  shutdown();
  if (!m_server) return;
  // The gRPC server is shut down and waited for, so no call runs; its destructor still closes
  // the connections (their last replies written out), then runs gRPC's library teardown, which
  // joins an executor thread that can sit in a 10 s poll (seen in about half of the stops whose
  // SIGTERM came during a call: kcached took 10 s to exit after "stopped cleanly"). So it runs
  // on a thread of its own, waited for up to k_grpc_teardown_grace; past that the teardown is
  // left to the process's exit, which does not wait for it (main). The server holds no pointer
  // into what is destroyed after it here once it is in that teardown.
  std::promise<void> torn_down;
  std::future<void> done = torn_down.get_future();
  std::thread([server = std::move(m_server), torn_down = std::move(torn_down)]() mutable {
    server.reset();
    torn_down.set_value();
  }).detach();
  if (done.wait_for(k_grpc_teardown_grace) == std::future_status::timeout) {
    spdlog::debug("gRPC's library teardown is still waiting on a poll; left to the exit");
  }
}

void Daemon::shutdown() {
  if (m_stopped) return;
  m_stopped = true;
  if (m_gate) m_gate->stop_accepting();  // connections open may still finish their calls
  m_metrics_server.reset();
  m_http.reset();
  m_status.reset();  // before m_service, whose counters it samples
  if (m_server) {
    if (auto* health = m_server->GetHealthCheckService()) health->Shutdown();  // NOT_SERVING from now on
    // Our own drain waits for the calls in progress (compiles may take long). gRPC's Shutdown
    // then gets a short deadline to flush their replies: past it, it would linger for idle
    // client connections (up to the clients' 5 s backup poll), with nothing left to deliver.
    int left = m_calls->drain(std::chrono::steady_clock::now() + k_shutdown_grace);
    if (left > 0) spdlog::warn("{} calls still running after {}s; cancelling them", left, k_shutdown_grace.count());
    // Their handlers are done, but a unary call's reply leaves gRPC after that, and gRPC's
    // deadline below would cut a long reply to a client slow to read: first, until the replies
    // under way have passed the gate.
    if (m_gate && !m_gate->await_replies(std::chrono::steady_clock::now() + k_reply_send_grace)) {
      spdlog::warn("replies were still on their way to clients after {}s; shutting gRPC down", k_reply_send_grace.count());
    }
    m_server->Shutdown(std::chrono::system_clock::now() + k_reply_flush_grace);
    m_server->Wait();
  }
  if (m_gate && !m_gate->drain(std::chrono::steady_clock::now() + k_gate_drain_grace)) {
    spdlog::warn("some replies were still on their way to clients after {} ms; cutting their connections",
                 milliseconds(k_gate_drain_grace));
  }
  m_gate.reset();
  if (m_pool) m_pool->shutdown();
  if (m_remote) {
    // What this daemon compiled reaches the fleet, unless Redis is too slow to take it now.
    std::size_t left = m_remote->drain(std::chrono::steady_clock::now() + k_remote_flush_grace);
    if (left > 0) spdlog::warn("{} remote writes not made at shutdown", left);
  }
  if (m_store) {
    if (auto flushed = m_store->flush(); !flushed) spdlog::error("{}", flushed.error().message);
  }
}

}  // namespace kcache::server
