#include "api/service.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "image_proto.hpp"
#include "kcache/amd_target.hpp"
#include "kcache/key.hpp"
#include "wire/wire.hpp"

namespace kcache::server {
namespace {

using Clock = std::chrono::steady_clock;

// Whether the client asked for an error's whole report (and raised its metadata limit to take it).
bool wants_full_report(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(wire::k_full_report_header);
  return it != metadata.end() && it->second == "full";
}

}  // namespace

std::optional<Role> KCacheService::role_needed(std::string_view method) {
  static const std::map<std::string_view, Role> k_roles = {
      {"Compile", Role::compile}, {"Fetch", Role::read},   {"Lookup", Role::read}, {"GetCapabilities", Role::read},
      {"GetStats", Role::read},   {"Verify", Role::admin}, {"Evict", Role::admin}, {"Purge", Role::admin},
      {"Step", Role::compile},    {"ReportUncacheable", Role::compile}};
  auto it = k_roles.find(method);
  if (it == k_roles.end()) return std::nullopt;
  return it->second;
}

Expected<CallTracker::Guard> KCacheService::admit(const grpc::ServerContextBase& context, const char* method,
                                                  std::string* client) {
  // Every handler names its own method, so a missing entry is a bug: refuse rather than allow.
  auto needed = role_needed(method);
  if (!needed) return make_error(ErrorCode::k_internal, std::string("no role defined for ") + method);
  if (auto allowed = m_auth.check(context, *needed, method, client); !allowed) return allowed.error();
  return enter_call(m_calls);
}

grpc::Status KCacheService::Compile(grpc::ServerContext* context, const v1::CompileRequest* request,
                                    v1::CompileResponse* response) {
  auto start = Clock::now();
  auto call = admit(*context, "Compile");
  if (!call) return wire::to_status(call.error());
  const Toolchain& toolchain = m_cache.toolchain();
  auto ask = wire::compile_ask(*request, toolchain.host_triple, toolchain.max_ptx_version, m_limits.inline_reply_bytes);
  auto answer = ask ? m_cache.compile(*ask) : Expected<CompileAnswer>(ask.error());
  if (!ask) {
    m_cache.refused(request->side() == v1::SIDE_HOST ? "host" : "device", {request->archs().begin(), request->archs().end()},
                    start, ask.error());
  }
  if (!answer) {
    return wire::to_status(answer.error(), wants_full_report(*context) ? wire::k_full_report_bytes
                                                                       : wire::k_default_report_bytes);
  }
  response->set_key(answer->key.hex());
  response->set_outcome(wire::to_proto(answer->outcome));
  for (AnsweredImage& image : answer->images) {
    v1::Image* out = response->add_images();
    to_proto(image.meta, *out);
    out->set_data(std::move(image.data));
    if (image.needs_jit) out->set_needs_jit(true);
  }
  for (std::string& d : answer->diagnostics) response->add_diagnostics(std::move(d));
  return grpc::Status::OK;
}

// Streams one image in chunks from gRPC's own event threads (the callback API): no hand-off to a
// synchronous worker thread per call, which was most of a small fetch's cost (bench/README.md).
// The last chunk goes with the status in one batch.
class KCacheService::FetchReactor final : public grpc::ServerWriteReactor<v1::FetchResponse> {
 public:
  FetchReactor(KCacheService& service, grpc::CallbackServerContext* context, const v1::FetchRequest& request)
      : m_service(service), m_key(request.key()), m_arch(request.arch()) {
    auto call = service.admit(*context, "Fetch");
    if (!call) {
      Finish(wire::to_status(call.error()));
      return;
    }
    m_call.emplace(std::move(*call));
    auto ask = wire::select_ask(request);
    auto found = ask ? service.m_cache.select(*ask) : Expected<SelectedImage>(ask.error());
    if (!ask) service.m_cache.refused_fetch(m_key, "arch=" + m_arch, ask.error());
    if (!found) {
      Finish(wire::to_status(found.error()));
      return;
    }
    m_image = std::move(found->image);
    to_proto(m_image->meta, *m_message.mutable_image());
    m_message.mutable_image()->set_needs_jit(found->needs_jit);
    write_next();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Error gone = make_error(ErrorCode::k_cancelled, "the client went away during the fetch");
      m_service.m_cache.fetch_failed(m_key, "arch=" + m_arch, gone);
      Finish(wire::to_status(gone));
      return;
    }
    m_message.clear_image();
    write_next();
  }
  void OnDone() override { delete this; }

 private:
  void write_next() {
    std::string_view data = m_image->data;
    std::size_t n = std::min(m_service.m_limits.fetch_chunk_bytes, data.size() - m_offset);
    m_message.set_chunk(data.data() + m_offset, n);
    m_offset += n;
    if (m_offset < data.size()) {
      StartWrite(&m_message);
    } else {
      StartWriteAndFinish(&m_message, grpc::WriteOptions(), grpc::Status::OK);
    }
  }
  KCacheService& m_service;
  std::string m_key, m_arch;
  std::optional<CallTracker::Guard> m_call;  // held until the call is done, for the drain
  std::shared_ptr<const Image> m_image;
  v1::FetchResponse m_message;
  std::size_t m_offset = 0;
};

grpc::ServerWriteReactor<v1::FetchResponse>* KCacheService::Fetch(grpc::CallbackServerContext* context,
                                                                  const v1::FetchRequest* request) {
  return new FetchReactor(*this, context, *request);
}

grpc::ServerUnaryReactor* KCacheService::Lookup(grpc::CallbackServerContext* context, const grpc::ByteBuffer* request,
                                                grpc::ByteBuffer* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto answered = [&]() -> Expected<void> {
    auto call = admit(*context, "Lookup");
    if (!call) return call.error();
    // Counted in the bytes, before a key is built: LookupRequest.keys is field 2.
    auto keys = wire::count_repeated(*request, v1::LookupRequest::kKeysFieldNumber);
    if (!keys) return keys.error();
    if (*keys > m_limits.max_lookup_keys) {
      return make_error(ErrorCode::k_invalid_argument, "a lookup names at most " +
                                                           std::to_string(m_limits.max_lookup_keys) + " keys; this one names " +
                                                           std::to_string(*keys) + ": split it");
    }
    v1::LookupRequest parsed;
    grpc::ByteBuffer bytes(*request);
    if (!grpc::SerializationTraits<v1::LookupRequest>::Deserialize(&bytes, &parsed).ok()) {
      return make_error(ErrorCode::k_invalid_argument, "the request is not a kcache.v1.LookupRequest");
    }
    v1::LookupResponse answer;
    if (auto ok = lookup(parsed, answer); !ok) return ok;
    bool own = false;
    grpc::Status serialized = grpc::SerializationTraits<v1::LookupResponse>::Serialize(answer, response, &own);
    if (!serialized.ok()) return make_error(ErrorCode::k_internal, "the lookup's answer: " + serialized.error_message());
    return {};
  }();
  reactor->Finish(answered ? grpc::Status::OK : wire::to_status(answered.error()));
  return reactor;
}

Expected<void> KCacheService::lookup(const v1::LookupRequest& request, v1::LookupResponse& response) {
  auto side = wire::from_proto(request.side());
  if (!side) return side.error();
  for (const std::string& hex : request.keys()) {
    auto key = parse_key(hex);
    if (!key) return key.error();
    auto metas = m_cache.lookup(*side, *key);
    if (!metas) return metas.error();
    v1::LookupResponse::Result* result = response.add_results();
    result->set_key(key->hex());
    result->set_found(!metas->empty());
    for (const ImageMeta& m : *metas) to_proto(m, *result->add_images());
  }
  return {};
}

grpc::Status KCacheService::GetCapabilities(grpc::ServerContext* context, const v1::GetCapabilitiesRequest*,
                                            v1::Capabilities* response) {
  auto call = admit(*context, "GetCapabilities");
  if (!call) return wire::to_status(call.error());
  const Toolchain& t = m_cache.toolchain();
  response->set_fingerprint(to_hex(t.fingerprint));
  response->set_key_format_version(k_key_format_version);
  response->set_llvm_version(t.llvm_version);
  response->set_cuda_present(t.cuda_present);
  response->set_cuda_root(t.cuda_root.string());
  response->set_ptxas_version(t.ptxas_version);
  response->set_rtlib_digest(t.rtlib_digest);
  for (const std::string& a : t.device_archs) response->add_device_archs(a);
  for (const std::string& a : t.cubin_archs) response->add_cubin_archs(a);
  response->add_device_kinds(v1::KIND_PTX);
  if (t.cuda_present) response->add_device_kinds(v1::KIND_CUBIN);
  if (t.amdgpu_present) {
    for (const AmdProcessor& p : amd_processors()) response->add_amd_archs(std::string(p.name));
    if (!t.lld.empty()) response->add_device_kinds(v1::KIND_HSACO);
    response->add_device_kinds(v1::KIND_AMDGCN);
  }
  response->set_lld_version(t.lld_version);
  response->set_rocm_device_libs(t.rocm_device_libs.string());
  response->set_host_triple(t.host_triple);
  response->set_ptx_isa_version(static_cast<std::uint32_t>(t.max_ptx_version));
  response->set_cuda_version(t.cuda_version);
  response->set_libdevice_present(!t.libdevice.empty());
  response->set_cubin_assembler(assembler_name(t));
  response->mutable_limits()->set_max_module_bytes(m_cache.limits().max_module_bytes);
  response->mutable_limits()->set_max_archs(m_cache.limits().max_archs);
  response->mutable_limits()->set_max_message_bytes(m_limits.max_message_bytes);
  response->mutable_limits()->set_max_store_bytes(m_store.max_bytes());
  response->set_server_version(KCACHE_VERSION);
  response->set_http_port(static_cast<std::uint32_t>(m_http_port.load()));
  return grpc::Status::OK;
}

v1::Stats KCacheService::snapshot() const {
  v1::Stats stats;
  v1::Stats* response = &stats;
  StoreStats s = m_store.stats();
  const CacheCounters& c = m_cache.counters();
  // A build farm's requests are mostly build steps: hits, misses and coalesced count them with
  // the Compiles (compile_* alone, steps by tool below).
  std::uint64_t step_hits = 0, step_misses = 0, step_coalesced = 0;
  for (StepTool tool : all_step_tools()) {
    const StepCounters& counted = m_cache.step_counters(tool);
    step_hits += counted.hits, step_misses += counted.misses, step_coalesced += counted.coalesced;
  }
  response->set_compile_hits(c.hits);
  response->set_compile_misses(c.misses);
  response->set_compile_coalesced(c.coalesced);
  response->set_hits(c.hits + step_hits);
  response->set_misses(c.misses + step_misses);
  response->set_compiles(c.compiles);
  response->set_images_compiled(c.images_compiled);
  response->set_coalesced(c.coalesced + step_coalesced);
  response->set_errors(c.errors);
  response->set_fetches(c.fetches);
  response->set_jail(m_cache.jail().mode);
  response->set_jail_reason(m_cache.jail().reason);
  response->set_steps_unjailed(m_cache.jail().unjailed_steps);
  response->set_entries(s.entries);
  response->set_images(s.images);
  response->set_bytes(s.bytes);
  response->set_corrupt_dropped(s.corrupt_dropped);
  response->set_evictions(s.evictions);
  response->set_evicted_bytes(s.evicted_bytes);
  response->set_hot_cache_hits(s.hot_cache_hits);
  response->set_hot_cache_bytes(s.hot_cache_bytes);
  response->set_max_bytes(m_store.max_bytes());
  response->set_queued_jobs(m_pool.queue_depth());
  response->set_running_jobs(m_pool.running());
  response->set_worker_restarts(m_workers.restarts());
  response->set_worker_crashes(m_workers.crashes());
  if (const remote::RemoteTier* tier = m_cache.remote()) {
    remote::RemoteStats r = tier->stats();
    response->set_remote(tier->options().url);
    response->set_remote_hits(r.hits);
    response->set_remote_misses(r.misses);
    response->set_remote_errors(r.errors);
    response->set_remote_rejected(r.rejected);
    response->set_remote_refused_replies(r.refused_replies);
    response->set_remote_writes(r.writes);
    response->set_remote_write_drops(r.write_drops);
    response->set_remote_write_queue_depth(r.write_queue_depth);
    response->set_remote_write_queue_bytes(r.write_queue_bytes);
    response->set_lease_waits(r.lease_waits);
    response->set_lease_takeovers(r.lease_takeovers);
    response->set_remote_breaker_open(r.breaker_open ? 1 : 0);
  }
  for (StepTool tool : all_step_tools()) {
    const StepCounters& counted = m_cache.step_counters(tool);
    v1::StepCount* out = response->add_steps();
    out->set_tool(std::string(step_tool_name(tool)));
    out->set_hits(counted.hits);
    out->set_misses(counted.misses);
    out->set_coalesced(counted.coalesced);
    out->set_stored(counted.stored);
    out->set_failed(counted.failed);
  }
  for (const auto& [reason, count] : m_cache.uncacheable()) {
    v1::ReasonCount* out = response->add_uncacheable();
    out->set_reason(reason);
    out->set_count(count);
  }
  m_metrics.fill(stats);
  return stats;
}

grpc::Status KCacheService::GetStats(grpc::ServerContext* context, const v1::GetStatsRequest*, v1::Stats* response) {
  auto call = admit(*context, "GetStats");
  if (!call) return wire::to_status(call.error());
  *response = snapshot();
  return grpc::Status::OK;
}

grpc::Status KCacheService::Verify(grpc::ServerContext* context, const v1::VerifyRequest* request,
                                   v1::VerifyResponse* response) {
  auto call = admit(*context, "Verify");
  if (!call) return wire::to_status(call.error());
  auto report = m_store.verify(request->repair());
  if (!report) return wire::to_status(report.error());
  response->set_entries(report->entries);
  response->set_images(report->images);
  response->set_bytes(report->bytes);
  response->set_removed(report->removed);
  response->set_counters_wrong(report->counters_wrong);
  for (const VerifyProblem& p : report->problems) {
    v1::VerifyResponse::Problem* out = response->add_problems();
    out->set_side(wire::to_proto(p.side));
    out->set_key(p.key_hex);
    out->set_what(p.what);
  }
  spdlog::info("verify: {} good entries, {} bad, {} removed", report->entries, report->problems.size(),
               report->removed);
  return grpc::Status::OK;
}

grpc::Status KCacheService::Evict(grpc::ServerContext* context, const v1::EvictRequest* request,
                                  v1::EvictResponse* response) {
  std::string client;
  auto call = admit(*context, "Evict", &client);
  if (!call) return wire::to_status(call.error());
  auto side = wire::from_proto(request->side());
  if (!side) return wire::to_status(side.error());
  std::uint64_t evicted = 0;
  for (const std::string& hex : request->keys()) {
    auto key = parse_key(hex);
    if (!key) return wire::to_status(key.error());
    auto removed = m_store.remove(*side, *key);
    if (!removed) return wire::to_status(removed.error());
    evicted += *removed ? 1 : 0;
  }
  if (request->has_target_bytes()) {
    auto lru = m_store.evict(request->target_bytes());
    if (!lru) return wire::to_status(lru.error());
    evicted += *lru;
  }
  response->set_evicted(evicted);
  response->set_bytes(m_store.stats().bytes);
  spdlog::info("evict: {} entries removed on request of {}, {} bytes stored", evicted, client, response->bytes());
  return grpc::Status::OK;
}

grpc::Status KCacheService::Step(grpc::ServerContext* context, const v1::StepRequest* request,
                                 v1::StepResponse* response) {
  std::string client;
  auto call = admit(*context, "Step", &client);
  if (!call) return wire::to_status(call.error());
  // An offered object is linked by other machines: only a daemon, or a client trusted to publish,
  // writes one. A compile client keeps its own objects (the launcher, on PERMISSION_DENIED).
  if (request->has_offered()) {
    if (auto allowed = m_auth.check(*context, Role::publish, "Step (an offered object)"); !allowed) {
      return wire::to_status(allowed.error());
    }
  }
  auto ask = wire::step_ask(*request);
  if (!ask) {
    spdlog::warn("step refused client={} code={} error={:.512}", client, error_code_name(ask.error().code),
                 ask.error().message);
    return wire::to_status(ask.error());
  }
  ask->client = client;
  auto answer = m_cache.step(*ask);
  if (!answer) return wire::to_status(answer.error());
  response->set_key(answer->key.hex());
  response->set_outcome(wire::to_proto(answer->outcome));
  response->set_exit_code(answer->exit_code);
  for (auto& [name, bytes] : answer->outputs) {
    v1::StepFile* file = response->add_outputs();
    file->set_name(name);
    file->set_content(std::move(bytes));
  }
  response->set_stdout_text(std::move(answer->stdout_text));
  response->set_stderr_text(std::move(answer->stderr_text));
  return grpc::Status::OK;
}

grpc::Status KCacheService::ReportUncacheable(grpc::ServerContext* context, const v1::UncacheableReport* request,
                                              v1::UncacheableReply*) {
  auto call = admit(*context, "ReportUncacheable");
  if (!call) return wire::to_status(call.error());
  m_cache.count_uncacheable(request->reason());
  return grpc::Status::OK;
}

grpc::Status KCacheService::Purge(grpc::ServerContext* context, const v1::PurgeRequest*,
                                  v1::PurgeResponse* response) {
  std::string client;
  auto call = admit(*context, "Purge", &client);
  if (!call) return wire::to_status(call.error());
  auto evicted = m_store.evict(0);
  if (!evicted) return wire::to_status(evicted.error());
  response->set_evicted(*evicted);
  spdlog::warn("purge: every entry removed on request of {} ({})", client, *evicted);
  return grpc::Status::OK;
}

}  // namespace kcache::server
