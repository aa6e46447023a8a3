#include "service/service.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <map>
#include <thread>

#include "kcache/amd_target.hpp"
#include "kcache/key.hpp"
#include "image_proto.hpp"
#include "kcache/select.hpp"
#include "compile/source_pipeline.hpp"
#include "remote/entry.hpp"
#include "wire/wire.hpp"

namespace kcache::server {
namespace {

using Clock = std::chrono::steady_clock;

// Beyond the job's deadline, time for its worker to report the overrun itself.
constexpr auto k_deadline_slack = std::chrono::seconds(5);

std::string image_list(const std::vector<ImageMeta>& metas) {
  std::string out;
  for (const ImageMeta& m : metas) {
    if (!out.empty()) out += ", ";
    out += m.arch + "." + std::string(kind_name(m.kind));
  }
  return out;
}

const char* outcome_name(v1::Outcome outcome) {
  switch (outcome) {
    case v1::OUTCOME_HIT: return "hit";
    case v1::OUTCOME_MISS: return "miss";
    case v1::OUTCOME_COALESCED: return "coalesced";
    default: return "?";
  }
}

bool has_image(const std::vector<ImageMeta>& metas, const ImageRequest& want) {
  return std::any_of(metas.begin(), metas.end(), [&](const ImageMeta& m) { return m.id() == want; });
}

// Whether a driver of CUDA `driver` (0: not stated) loads the cubins this daemon's toolkit makes.
bool cubins_loadable(const Toolchain& toolchain, CudaVersion driver) {
  return driver == 0 || toolchain.cuda_version == 0 || driver_loads_cubins_of(driver, toolchain.cuda_version);
}

// Whether the client asked for an error's whole report (and raised its metadata limit to take it).
bool wants_full_report(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(wire::k_full_report_header);
  return it != metadata.end() && it->second == "full";
}

}  // namespace

CallTracker::Guard::~Guard() {
  if (m_tracker == nullptr) return;
  std::lock_guard lock(m_tracker->m_mutex);
  if (--m_tracker->m_active == 0) m_tracker->m_idle.notify_all();
}

std::optional<CallTracker::Guard> CallTracker::enter() {
  std::lock_guard lock(m_mutex);
  if (m_draining) return std::nullopt;
  ++m_active;
  return Guard(this);
}

int CallTracker::drain(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(m_mutex);
  m_draining = true;
  m_idle.wait_until(lock, deadline, [this] { return m_active == 0; });
  return m_active;
}

std::optional<Role> KCacheService::role_needed(std::string_view method) {
  static const std::map<std::string_view, Role> k_roles = {
      {"Compile", Role::compile}, {"Fetch", Role::read},   {"Lookup", Role::read}, {"GetCapabilities", Role::read},
      {"GetStats", Role::read},   {"Verify", Role::admin}, {"Evict", Role::admin}, {"Purge", Role::admin}};
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
  return enter();
}

Expected<CallTracker::Guard> KCacheService::enter() {
  auto call = m_calls.enter();
  if (!call) return make_error(ErrorCode::k_unavailable, "kcached is shutting down; retry shortly");
  return std::move(*call);
}

void KCacheService::fetch_failed(std::string_view key, std::string_view what, const Error& error) {
  ++m_counters.errors;
  spdlog::warn("fetch key={:.12} {} code={} error={}", key, what, error_code_name(error.code), error.message);
}

Expected<KCacheService::FetchedImage> KCacheService::fetch_image(const v1::FetchRequest& request, Reach reach) {
  auto found = find_image(request, reach);
  if (!found && is_would_block(found.error())) return found;  // asked again, and counted then
  ++m_counters.fetches;
  if (!found) fetch_failed(request.key(), "arch=" + request.arch(), found.error());
  return found;
}

bool KCacheService::all_stored(Side side, const Key& key, const std::vector<ImageRequest>& images) {
  auto stored = m_store.list(side, key);
  return stored && std::all_of(images.begin(), images.end(), [&](const ImageRequest& want) { return has_image(*stored, want); });
}

Expected<CompileOutput> KCacheService::compile_and_store(const JobSpec& spec, const Key& key,
                                                        const std::vector<std::string_view>& modules,
                                                        const std::vector<std::pair<std::string_view, std::string_view>>& headers,
                                                        std::vector<ImageRequest> missing, Answer& answer) {
  // One compile per (side, key, images): later identical requests wait for the first one's.
  std::string flight = remote::flight_of(spec.side, key, missing);

  // Owned by the queued parts, which may outlive this request.
  struct Pending {
    std::vector<std::string> modules;
    std::vector<std::pair<std::string, std::string>> headers;
    CompileJob job;
    std::vector<CompileJob> parts;  // split_by_arch(job): each runs on its own worker
    std::mutex mutex;               // guards outputs, left and started
    std::vector<Expected<CompileOutput>> outputs;
    std::size_t left = 0;
    Clock::time_point started = Clock::time_point::max();
    std::optional<remote::RemoteTier::Lease> lease;  // the fleet's, held while compiling
    std::promise<Expected<CompileOutput>> done;
  };
  std::shared_future<Expected<CompileOutput>> result;
  std::shared_ptr<Pending> pending;
  {
    std::lock_guard lock(m_in_flight_mutex);
    if (auto it = m_in_flight.find(flight); it != m_in_flight.end()) {
      result = it->second;
    } else if (all_stored(spec.side, key, missing)) {
      // The compile this request missed finished between the caller's listing and now (it
      // stores before it leaves the table): nothing to compile, the images are read as stored.
      answer = Answer::coalesced;
      return CompileOutput{};
    } else {
      pending = std::make_shared<Pending>();
      result = pending->done.get_future().share();
      m_in_flight.emplace(flight, result);
    }
  }
  answer = pending == nullptr ? Answer::coalesced : Answer::compiled;
  if (pending && m_remote != nullptr) {
    // Another daemon may have compiled it, or be compiling it now.
    FleetTurn turn = fleet_turn(spec.side, key, flight, missing, Clock::now() + m_limits.job_timeout);
    if (turn.pulled) {
      answer = Answer::remote;
      {
        std::lock_guard lock(m_in_flight_mutex);
        m_in_flight.erase(flight);
      }
      pending->done.set_value(CompileOutput{});  // stored: the images are read as stored
      return CompileOutput{};
    }
    pending->lease = std::move(turn.lease);
  }
  if (pending) {
    pending->modules.assign(modules.begin(), modules.end());
    pending->headers.assign(headers.begin(), headers.end());
    pending->job = CompileJob{spec, {pending->modules.begin(), pending->modules.end()}, std::move(missing), {},
                              Clock::now() + m_limits.job_timeout};
    for (const auto& [name, bytes] : pending->headers) pending->job.headers.emplace_back(name, bytes);
    // A job for several archs takes as many free workers as it has archs: its archs compile at
    // once. With no more than one free, it queues whole.
    pending->parts = split_by_arch(pending->job, m_pool.idle());
    pending->outputs.resize(pending->parts.size(), make_error(ErrorCode::k_internal, "not compiled"));
    pending->left = pending->parts.size();

    // The last part to end stores the whole job, then releases its waiters.
    auto part_done = [this, pending, flight, key](std::size_t index, Expected<CompileOutput> output) {
      Clock::time_point started;
      {
        std::lock_guard lock(pending->mutex);
        pending->outputs[index] = std::move(output);
        if (--pending->left > 0) return;
        started = pending->started;
      }
      auto merged = merge_parts(pending->job, std::move(pending->outputs));
      if (started != Clock::time_point::max()) {
        double seconds = std::chrono::duration<double>(Clock::now() - started).count();
        m_metrics.observe_compile(seconds);
        m_metrics.observe_tier(Metrics::Tier::compile, seconds);
      }
      if (merged) {
        ++m_counters.compiles;
        m_counters.images_compiled += merged->images.size();
        EntryRecord record{pending->job.spec.format, pending->job.spec.target,
                           static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                                          std::chrono::system_clock::now().time_since_epoch())
                                                          .count())};
        if (auto put = m_store.put(pending->job.spec.side, key, record, merged->images); !put) {
          // Too large for the whole cache: the caller still gets its images, uncached.
          if (put.error().code != ErrorCode::k_resource_exhausted) merged = put.error();
          else merged->diagnostics.push_back(put.error().message);
        }
        // To the fleet in the background; the lease goes once the entry is written.
        if (merged && m_remote != nullptr) {
          m_remote->write(pending->job.spec.side, key, record, merged->images, std::move(pending->lease));
        }
      }
      if (pending->lease) m_remote->release(std::move(*pending->lease));
      {
        // Stored (or failed) before it leaves the table: a request arriving now sees a hit.
        std::lock_guard lock(m_in_flight_mutex);
        m_in_flight.erase(flight);
      }
      pending->done.set_value(std::move(merged));
    };
    for (std::size_t i = 0; i < pending->parts.size(); ++i) {
      auto queued = m_pool.submit([this, pending, key, part_done, i] {
        {
          std::lock_guard lock(pending->mutex);
          pending->started = std::min(pending->started, Clock::now());
        }
        part_done(i, m_workers.compile(pending->parts[i], key));
      });
      if (!queued) part_done(i, queued.error());
    }
  }
  // The worker is killed at the job's deadline and the job fails with DEADLINE_EXCEEDED; this
  // wait only guards against a job that never reaches a worker (a queue stuck behind others).
  if (result.wait_for(m_limits.job_timeout + k_deadline_slack) == std::future_status::timeout) {
    return make_error(ErrorCode::k_deadline_exceeded,
                      "the compile of key " + key.hex() + " did not finish within the job time limit (" +
                          std::to_string(m_limits.job_timeout.count()) + " s, --job-timeout)");
  }
  return result.get();
}

Expected<std::shared_ptr<const Image>> KCacheService::get_image(Side side, const Key& key, const ImageRequest& which,
                                                                Reach reach) {
  auto start = Clock::now();
  bool from_memory = false;
  auto image = m_store.get(side, key, which, &from_memory, reach);
  if (image) {
    m_metrics.observe_tier(from_memory ? Metrics::Tier::hot : Metrics::Tier::local,
                           std::chrono::duration<double>(Clock::now() - start).count());
  }
  return image;
}

KCacheService::Pull KCacheService::pull_remote(Side side, const Key& key, const std::vector<ImageRequest>* wanted) {
  auto start = Clock::now();
  auto entry = m_remote->read(side, key);
  if (!entry) {
    spdlog::debug("remote read of {:.12} failed: {}", key.hex(), entry.error().message);
    return Pull::unavailable;
  }
  bool complete = wanted == nullptr
                      ? !entry->images.empty()
                      : std::all_of(wanted->begin(), wanted->end(), [&](const ImageRequest& w) {
                          return std::any_of(entry->images.begin(), entry->images.end(),
                                             [&](const Image& i) { return i.meta.id() == w; });
                        });
  if (!complete) return Pull::miss;
  // Verified (digest and the fleet's HMAC) by the tier. Served from memory at once and written
  // to RocksDB in the background; host images pass the wall's check before anything can read them.
  std::vector<ImageRequest> pulled;
  for (const Image& image : entry->images) pulled.push_back(image.meta.id());
  m_store.put_soon(side, key, entry->record, std::move(entry->images));
  if (side == Side::host && !all_stored(side, key, pulled)) return Pull::miss;  // refused by the host image check (logged)
  m_metrics.observe_tier(Metrics::Tier::remote, std::chrono::duration<double>(Clock::now() - start).count());
  return Pull::hit;
}

bool KCacheService::read_through(Side side, const Key& key, const std::vector<ImageRequest>* wanted) {
  if (m_remote == nullptr) return false;
  Pull pulled = pull_remote(side, key, wanted);
  if (pulled == Pull::hit) m_remote->count_hit();
  if (pulled == Pull::miss) m_remote->count_miss();
  return pulled == Pull::hit;
}

KCacheService::FleetTurn KCacheService::fleet_turn(Side side, const Key& key, const std::string& flight,
                                                   const std::vector<ImageRequest>& missing, Clock::time_point deadline) {
  FleetTurn turn;
  bool waited = false;
  std::string lease_key = remote::lease_key(side, key, flight);
  for (;;) {
    Pull pulled = pull_remote(side, key, &missing);
    if (pulled == Pull::hit) {
      m_remote->count_hit();
      turn.pulled = true;
      return turn;
    }
    if (pulled == Pull::unavailable) return turn;  // compile here, without Redis
    remote::RemoteTier::Lease lease;
    auto state = m_remote->try_lease(side, key, flight, lease);
    if (state == remote::RemoteTier::LeaseState::acquired) {
      // Another daemon may have written the entry and released its lease between the look
      // above and taking the lease: look once more, now that no one else can be compiling.
      if (pull_remote(side, key, &missing) == Pull::hit) {
        m_remote->release(std::move(lease));
        m_remote->count_hit();
        turn.pulled = true;
        return turn;
      }
      // Taken after waiting: the holder ended without a result (it died and its lease expired).
      if (waited) m_remote->count_takeover();
      m_remote->count_miss();
      turn.lease = std::move(lease);
      return turn;
    }
    if (state == remote::RemoteTier::LeaseState::unavailable) {
      // A read-only daemon takes no lease, but still waits for one another daemon holds.
      auto held = m_remote->read_only() ? m_remote->lease_held(lease_key) : Expected<bool>(false);
      if (!held || !*held) {
        m_remote->count_miss();
        return turn;
      }
    }
    if (!waited) m_remote->count_lease_wait();
    waited = true;
    // The holder writes the entry, then releases the lease; a holder that died lets it expire.
    auto pause = std::chrono::milliseconds(2);
    for (;;) {
      if (Clock::now() >= deadline) {
        spdlog::warn("compile key={:.12}: another daemon's lease outlived the job time limit; compiling here", key.hex());
        m_remote->count_miss();
        return turn;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(100));
      auto held = m_remote->lease_held(lease_key);
      if (!held) {
        m_remote->count_miss();
        return turn;
      }
      if (!*held) break;
    }
  }
}

Expected<v1::Outcome> KCacheService::compile(const v1::CompileRequest& request, v1::CompileResponse& response,
                                             std::string& key_hex, bool retried) {
  const Toolchain& toolchain = m_compiler.toolchain();
  if (std::size_t bytes = wire::module_bytes(request); bytes > m_limits.max_module_bytes) {
    return make_error(ErrorCode::k_resource_exhausted,
                      std::string(request.linked_modules_size() > 0 ? "the modules are " : "the module is ") +
                          std::to_string(bytes) + " bytes; this kcached accepts " +
                          std::to_string(m_limits.max_module_bytes) + " at most (--max-module-size)");
  }
  if (static_cast<std::uint32_t>(request.archs_size()) > m_limits.max_archs) {
    return make_error(ErrorCode::k_invalid_argument,
                      "the job names " + std::to_string(request.archs_size()) + " archs; this kcached accepts " +
                          std::to_string(m_limits.max_archs) + " per job (--max-archs): split it");
  }
  auto spec = wire::job_spec(request, toolchain.host_triple, toolchain.max_ptx_version);
  if (!spec) return spec.error();
  auto images = wire::image_requests(request, *spec);
  if (!images) return images.error();
  // A driver older than the toolkit's major version cannot load its cubins: PTX at an ISA the
  // driver JITs takes their place (the key carries that ISA, KEY_FORMAT.md tag 12).
  std::string cubins_left_out;
  std::vector<std::string> jit_archs;  // archs whose cubin became PTX
  if (spec->side == Side::device && !cubins_loadable(toolchain, request.driver_version())) {
    for (const ImageRequest& r : *images) {
      if (r.kind == ImageKind::cubin) jit_archs.push_back(r.arch);
    }
    if (!jit_archs.empty()) {
      cubins_left_out = "CUDA " + cuda_version_name(toolchain.cuda_version) + " made no cubin for a driver of CUDA " +
                        cuda_version_name(request.driver_version()) +
                        ", which cannot load it: PTX in its place (the driver JITs it)";
      if (spec->has_ptx_input()) {
        return make_error(ErrorCode::k_failed_precondition,
                          "the job's modules are PTX, whose only output is a cubin, and this kcached's cubins come "
                          "from CUDA " + cuda_version_name(toolchain.cuda_version) + ", which a driver of CUDA " +
                              cuda_version_name(request.driver_version()) +
                              " cannot load: let the driver JIT the PTX itself, or update it");
      }
      images = ptx_in_place_of_cubins(*images);
    }
  }
  if (auto supported = m_compiler.check_supported(*spec, *images); !supported) return supported.error();

  std::vector<std::string_view> modules = wire::modules_of(request);
  std::vector<std::pair<std::string_view, std::string_view>> headers;
  for (const wire::NamedBytes& h : wire::headers_of(request)) headers.emplace_back(h.name, h.bytes);
  if (spec->is_source()) {
    if (auto ok = check_includes("the source", modules.front(), headers); !ok) return ok.error();
  }
  Key key = compute_key(*spec, modules, toolchain.fingerprint);
  key_hex = key.hex();
  response.set_key(key_hex);

  auto stored = m_store.list(spec->side, key);
  if (!stored) return stored.error();
  std::vector<ImageRequest> missing;
  for (const ImageRequest& want : *images) {
    if (!has_image(*stored, want)) missing.push_back(want);
  }

  std::vector<Image> compiled;
  Answer answer = Answer::compiled;
  if (!missing.empty()) {
    auto output = compile_and_store(*spec, key, modules, headers, missing, answer);
    if (!output) return output.error();
    for (std::string& d : output->diagnostics) response.add_diagnostics(std::move(d));
    compiled = std::move(output->images);
  }

  std::size_t inline_left = request.digests_only() ? 0 : m_limits.inline_reply_bytes;
  auto attach = [&](std::string data, v1::Image& out) {
    if (data.size() > inline_left) return;  // the client fetches it
    inline_left -= data.size();
    out.set_data(std::move(data));
  };
  for (const ImageRequest& want : *images) {
    v1::Image* out = response.add_images();
    auto fresh = std::find_if(compiled.begin(), compiled.end(), [&](const Image& i) { return i.meta.id() == want; });
    if (fresh != compiled.end()) {
      to_proto(fresh->meta, *out);
      attach(std::move(fresh->data), *out);
      continue;
    }
    // Bytes that would not travel inline are not read here: the listing has the metadata.
    auto listed = std::find_if(stored->begin(), stored->end(), [&](const ImageMeta& m) { return m.id() == want; });
    if (listed != stored->end() && listed->size > inline_left) {
      to_proto(*listed, *out);
      continue;
    }
    auto image = get_image(spec->side, key, want);
    if (!image) {
      // Dropped as corrupt between the listing and now: compile it again, once.
      if (image.error().code != ErrorCode::k_not_found || retried) return image.error();
      response.Clear();
      return compile(request, response, key_hex, true);
    }
    to_proto((*image)->meta, *out);
    attach((*image)->data, *out);
  }
  if (!cubins_left_out.empty()) {
    response.add_diagnostics(cubins_left_out);
    for (v1::Image& image : *response.mutable_images()) {
      if (std::find(jit_archs.begin(), jit_archs.end(), image.arch()) != jit_archs.end()) image.set_needs_jit(true);
    }
  }
  if (missing.empty() || answer == Answer::remote) return v1::OUTCOME_HIT;
  return answer == Answer::coalesced ? v1::OUTCOME_COALESCED : v1::OUTCOME_MISS;
}

grpc::Status KCacheService::Compile(grpc::ServerContext* context, const v1::CompileRequest* request,
                                    v1::CompileResponse* response) {
  auto start = Clock::now();
  auto call = admit(*context, "Compile");
  if (!call) return wire::to_status(call.error());
  std::string key_hex;
  auto outcome = compile(*request, *response, key_hex);
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  std::string archs;
  for (const std::string& a : request->archs()) archs += (archs.empty() ? "" : ",") + a;
  const char* side = request->side() == v1::SIDE_HOST ? "host" : "device";
  if (!outcome) {
    ++m_counters.errors;
    spdlog::warn("compile key={:.12} side={} archs={} outcome=error ms={:.1f} code={} error={:.1024}",
                 key_hex.empty() ? "-" : key_hex, side, archs.empty() ? "-" : archs, ms,
                 error_code_name(outcome.error().code), outcome.error().message);
    return wire::to_status(outcome.error(), wants_full_report(*context) ? wire::k_full_report_bytes
                                                                        : wire::k_default_report_bytes);
  }
  response->set_outcome(*outcome);
  ++(*outcome == v1::OUTCOME_HIT ? m_counters.hits
                                  : *outcome == v1::OUTCOME_COALESCED ? m_counters.coalesced : m_counters.misses);
  spdlog::info("compile key={:.12} side={} archs={} outcome={} ms={:.1f}", key_hex, side,
               archs.empty() ? "-" : archs, outcome_name(*outcome), ms);
  return grpc::Status::OK;
}

Expected<KCacheService::FetchedImage> KCacheService::find_image(const v1::FetchRequest& request, Reach reach) {
  auto key = parse_key(request.key());
  if (!key) return key.error();
  auto side_asked = wire::from_proto(request.side());
  if (!side_asked) return side_asked.error();
  auto kind_asked = wire::requested_kind(request.kind());
  if (!kind_asked) return kind_asked.error();
  const Side side = *side_asked;
  const std::optional<ImageKind> kind = *kind_asked;
  auto metas = m_store.list(side, *key, reach);
  if (!metas) return metas.error();
  if (metas->empty() && m_remote != nullptr && reach == Reach::memory) return would_block();  // Redis is a wait
  if (metas->empty() && read_through(side, *key, nullptr)) {
    metas = m_store.list(side, *key);
    if (!metas) return metas.error();
  }
  if (metas->empty()) {
    return make_error(ErrorCode::k_not_found,
                      "key " + key->hex() + " is not stored on the " + std::string(side_name(side)) + " side");
  }
  if (auto ok = check_cuda_version(request.driver_version()); !ok) return ok.error();
  std::vector<ImageRequest> candidates;
  for (const ImageMeta& m : *metas) candidates.push_back(m.id());
  // A stated driver passes over what it cannot load; PTX is read for its .version only then.
  CudaVersion driver = side == Side::device ? request.driver_version() : 0;
  CudaVersion toolkit = m_compiler.toolchain().cuda_version;
  Loadable loadable;
  bool blocked = false;  // a PTX image to judge was not in memory (Reach::memory)
  if (driver != 0) {
    loadable = [&](std::size_t i) {
      if (candidates[i].kind == ImageKind::cubin) return driver_loads(driver, toolkit, true, {});
      auto image = m_store.get(side, *key, candidates[i], nullptr, reach);
      if (!image && is_would_block(image.error())) blocked = true;
      return image && driver_loads(driver, toolkit, false, (*image)->data);
    };
  }
  auto selected = select_for_side(side, candidates, request.arch(), kind, loadable);
  if (blocked) return would_block();
  if (!selected) return selected.error();
  const std::optional<Selection>& chosen = *selected;
  auto unfiltered = driver != 0 ? select_for_side(side, candidates, request.arch(), kind) : selected;
  if (!chosen && unfiltered && unfiltered->has_value()) {
    return make_error(ErrorCode::k_not_found,
                      "key " + key->hex() + " has no image for " + request.arch() + " that a driver of CUDA " +
                          cuda_version_name(driver) + " loads: it has " + image_list(*metas) + ", made for CUDA " +
                          cuda_version_name(toolkit) + " (PTX ISA " + ptx_isa_name(m_compiler.toolchain().max_ptx_version) +
                          "). Compile the module for this driver (driver_version, --driver " + cuda_version_name(driver) +
                          "): its images have a key of their own");
  }
  if (!chosen) {
    return make_error(ErrorCode::k_not_found, "key " + key->hex() + " has no image that runs on " + request.arch() +
                                                  "; it has " + image_list(*metas));
  }
  auto image = get_image(side, *key, candidates[chosen->index], reach);
  if (!image) return image.error();
  return FetchedImage{std::move(*image), chosen->needs_jit};
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
    auto found = service.fetch_image(request);
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
      m_service.fetch_failed(m_key, "arch=" + m_arch, gone);
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

Expected<KCacheService::FetchedImage> KCacheService::select_image(const v1::FetchRequest& request, Reach reach) {
  auto call = enter();
  if (!call) return call.error();
  return fetch_image(request, reach);
}

Expected<std::shared_ptr<const Image>> KCacheService::read_image(Side side, std::string_view key_hex, const ImageRequest& which,
                                                                 ReadFor purpose, Reach reach) {
  auto call = enter();
  if (!call) return call.error();
  auto key = parse_key(key_hex);
  if (!key) {
    if (purpose == ReadFor::fetch) ++m_counters.fetches;
    return key.error();
  }
  auto image = get_image(side, *key, which, reach);
  bool absent = !image && image.error().code == ErrorCode::k_not_found;
  // Asked again with Reach::anywhere, and counted then; Redis is a wait.
  if ((!image && is_would_block(image.error())) || (absent && m_remote != nullptr && reach == Reach::memory)) {
    return would_block();
  }
  if (purpose == ReadFor::fetch) ++m_counters.fetches;
  if (absent) {
    std::vector<ImageRequest> wanted = {which};
    if (read_through(side, *key, &wanted)) image = get_image(side, *key, which);
  }
  // Every earlier image of the compile was there too (the CLI stops at the first it lacks).
  if (image && purpose == ReadFor::compile_last) ++m_counters.hits;
  if (!image && image.error().code != ErrorCode::k_not_found) {
    fetch_failed(key_hex, which.arch + "." + std::string(kind_name(which.kind)), image.error());
  }
  return image;
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
    auto metas = m_store.list(*side, *key);
    if (!metas) return metas.error();
    if (metas->empty() && read_through(*side, *key, nullptr)) {
      metas = m_store.list(*side, *key);
      if (!metas) return metas.error();
    }
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
  const Toolchain& t = m_compiler.toolchain();
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
  response->mutable_limits()->set_max_module_bytes(m_limits.max_module_bytes);
  response->mutable_limits()->set_max_archs(m_limits.max_archs);
  response->mutable_limits()->set_max_message_bytes(m_limits.max_message_bytes);
  response->mutable_limits()->set_max_store_bytes(m_limits.max_store_bytes);
  response->set_server_version(KCACHE_VERSION);
  response->set_http_port(static_cast<std::uint32_t>(m_http_port.load()));
  return grpc::Status::OK;
}

v1::Stats KCacheService::snapshot() const {
  v1::Stats stats;
  v1::Stats* response = &stats;
  StoreStats s = m_store.stats();
  response->set_hits(m_counters.hits);
  response->set_misses(m_counters.misses);
  response->set_compiles(m_counters.compiles);
  response->set_images_compiled(m_counters.images_compiled);
  response->set_coalesced(m_counters.coalesced);
  response->set_errors(m_counters.errors);
  response->set_fetches(m_counters.fetches);
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
  if (m_remote != nullptr) {
    remote::RemoteStats r = m_remote->stats();
    response->set_remote(m_remote->options().url);
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
