#include "cache/cache.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <future>

#include "kcache/includes.hpp"
#include "kcache/select.hpp"
#include "remote/entry.hpp"

namespace kcache::server {
namespace {

using Clock = std::chrono::steady_clock;

// The most CPUs one job is lent.
constexpr std::size_t k_max_job_cpus = 8;

std::string image_list(const std::vector<ImageMeta>& metas) {
  std::string out;
  for (const ImageMeta& m : metas) {
    if (!out.empty()) out += ", ";
    out += m.arch + "." + std::string(kind_name(m.kind));
  }
  return out;
}

bool has_image(const std::vector<ImageMeta>& metas, const ImageRequest& want) {
  return std::any_of(metas.begin(), metas.end(), [&](const ImageMeta& m) { return m.id() == want; });
}

// Whether a driver of CUDA `driver` (0: not stated) loads the cubins this daemon's toolkit makes.
bool cubins_loadable(const Toolchain& toolchain, CudaVersion driver) {
  return driver == 0 || toolchain.cuda_version == 0 || driver_loads_cubins_of(driver, toolchain.cuda_version);
}

std::string joined(const std::vector<std::string>& archs) {
  std::string out;
  for (const std::string& a : archs) out += (out.empty() ? "" : ",") + a;
  return out.empty() ? "-" : out;
}

// The limits a compile request must keep before anything is done for it.
Expected<void> check_limits(const CompileAsk& ask, const CacheLimits& limits) {
  if (ask.module_bytes > limits.max_module_bytes) {
    return make_error(ErrorCode::k_resource_exhausted,
                      std::string(ask.modules.size() > 1 ? "the modules are " : "the module is ") +
                          std::to_string(ask.module_bytes) + " bytes; this kcached accepts " +
                          std::to_string(limits.max_module_bytes) + " at most (--max-module-size)");
  }
  if (ask.archs.size() > limits.max_archs) {
    return make_error(ErrorCode::k_invalid_argument,
                      "the job names " + std::to_string(ask.archs.size()) + " archs; this kcached accepts " +
                          std::to_string(limits.max_archs) + " per job (--max-archs): split it");
  }
  return {};
}

}  // namespace

namespace {

// One line per compile request: an error as a warning, with its code and message.
void log_compile(std::string_view key_hex, std::string_view side, const std::vector<std::string>& archs,
                 Clock::time_point start, const Expected<CompileAnswer>& answered) {
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  if (answered) {
    spdlog::info("compile key={:.12} side={} archs={} outcome={} ms={:.1f}", key_hex, side, joined(archs),
                 outcome_name(answered->outcome), ms);
  } else {
    spdlog::warn("compile key={:.12} side={} archs={} outcome=error ms={:.1f} code={} error={:.1024}", key_hex, side,
                 joined(archs), ms, error_code_name(answered.error().code), answered.error().message);
  }
}

}  // namespace

void Cache::refused(std::string_view side, const std::vector<std::string>& archs, Clock::time_point start,
                    const Error& error) {
  ++m_counters.errors;
  m_activity.failed("compile", "-", side, archs, error);
  log_compile("-", side, archs, start, error);
}

Expected<CompileAnswer> Cache::compile(const CompileAsk& ask) {
  auto start = Clock::now();
  std::string key_hex = "-";
  auto answered = answer(ask, false, key_hex);
  if (answered) {
    ++(answered->outcome == Outcome::hit         ? m_counters.hits
       : answered->outcome == Outcome::coalesced ? m_counters.coalesced
                                                 : m_counters.misses);
  } else {
    ++m_counters.errors;
    m_activity.failed("compile", key_hex, side_name(ask.spec.side), ask.archs, answered.error());
  }
  log_compile(key_hex, side_name(ask.spec.side), ask.archs, start, answered);
  return answered;
}

Expected<CompileAnswer> Cache::answer(const CompileAsk& ask, bool retried, std::string& key_hex) {
  const Toolchain& toolchain = m_compiler.toolchain();
  if (auto ok = check_limits(ask, m_limits); !ok) return ok.error();
  JobSpec spec = ask.spec;
  std::vector<ImageRequest> images = ask.images;
  // A driver older than the toolkit's major version cannot load its cubins: PTX at an ISA the
  // driver JITs takes their place (the key carries that ISA, KEY_FORMAT.md tag 12).
  std::string cubins_left_out;
  std::vector<std::string> jit_archs;  // archs whose cubin became PTX
  if (spec.side == Side::device && !cubins_loadable(toolchain, ask.driver)) {
    for (const ImageRequest& r : images) {
      if (r.kind == ImageKind::cubin) jit_archs.push_back(r.arch);
    }
    if (!jit_archs.empty()) {
      cubins_left_out = "CUDA " + cuda_version_name(toolchain.cuda_version) + " made no cubin for a driver of CUDA " +
                        cuda_version_name(ask.driver) + ", which cannot load it: PTX in its place (the driver JITs it)";
      if (spec.has_ptx_input()) {
        return make_error(ErrorCode::k_failed_precondition,
                          "the job's modules are PTX, whose only output is a cubin, and this kcached's cubins come "
                          "from CUDA " + cuda_version_name(toolchain.cuda_version) + ", which a driver of CUDA " +
                              cuda_version_name(ask.driver) +
                              " cannot load: let the driver JIT the PTX itself, or update it");
      }
      images = ptx_in_place_of_cubins(images);
    }
  }
  if (spec.is_source()) {
    if (auto ok = check_includes("the source", ask.modules.front(), ask.headers); !ok) return ok.error();
  }
  CompileAnswer out;
  out.key = compute_key(spec, ask.modules, toolchain.fingerprint);
  const Key& key = out.key;
  if (auto supported = m_compiler.check_supported(spec, images); !supported) return supported.error();
  key_hex = key.hex();

  auto stored = m_store.list(spec.side, key);
  if (!stored) return stored.error();
  std::vector<ImageRequest> missing;
  for (const ImageRequest& want : images) {
    if (!has_image(*stored, want)) missing.push_back(want);
  }

  std::vector<Image> compiled;
  Answer how = Answer::compiled;
  if (!missing.empty()) {
    auto output = compile_and_store(ask, spec, key, missing, how);
    if (!output) return output.error();
    out.diagnostics = std::move(output->diagnostics);
    compiled = std::move(output->images);
  }

  std::size_t inline_left = ask.inline_bytes;
  auto attach = [&](std::string data, AnsweredImage& to) {
    if (data.size() > inline_left) return;  // the client fetches it
    inline_left -= data.size();
    to.data = std::move(data);
  };
  for (const ImageRequest& want : images) {
    AnsweredImage& to = out.images.emplace_back();
    to.needs_jit = std::find(jit_archs.begin(), jit_archs.end(), want.arch) != jit_archs.end();
    auto fresh = std::find_if(compiled.begin(), compiled.end(), [&](const Image& i) { return i.meta.id() == want; });
    if (fresh != compiled.end()) {
      to.meta = fresh->meta;
      attach(std::move(fresh->data), to);
      continue;
    }
    // Bytes that would not travel inline are not read here: the listing has the metadata.
    auto listed = std::find_if(stored->begin(), stored->end(), [&](const ImageMeta& m) { return m.id() == want; });
    if (listed != stored->end() && listed->size > inline_left) {
      to.meta = *listed;
      continue;
    }
    auto image = get_image(spec.side, key, want);
    if (!image) {
      // Dropped as corrupt between the listing and now: compile it again, once.
      if (image.error().code != ErrorCode::k_not_found || retried) return image.error();
      return answer(ask, true, key_hex);
    }
    to.meta = (*image)->meta;
    attach((*image)->data, to);
  }
  if (!cubins_left_out.empty()) out.diagnostics.push_back(std::move(cubins_left_out));
  out.outcome = missing.empty() || how == Answer::remote ? Outcome::hit
                : how == Answer::coalesced               ? Outcome::coalesced
                                                         : Outcome::miss;
  return out;
}

bool Cache::all_stored(Side side, const Key& key, const std::vector<ImageRequest>& images) {
  auto stored = m_store.list(side, key);
  return stored && std::all_of(images.begin(), images.end(), [&](const ImageRequest& want) { return has_image(*stored, want); });
}

Expected<CompileOutput> Cache::compile_and_store(const CompileAsk& ask, const JobSpec& spec, const Key& key,
                                                 std::vector<ImageRequest> missing, Answer& answer) {
  // Owned by the queued parts, which may outlive this request.
  struct Job {
    std::vector<std::string> modules;
    std::vector<std::pair<std::string, std::string>> headers;
    CompileJob job;
    std::vector<CompileJob> parts;  // split_by_arch(job): each runs on its own worker
  };
  auto job = std::make_shared<Job>();
  job->modules.assign(ask.modules.begin(), ask.modules.end());
  job->headers.assign(ask.headers.begin(), ask.headers.end());
  job->job = CompileJob{spec, {job->modules.begin(), job->modules.end()}, missing, {}, Clock::now() + m_limits.job_timeout};
  for (const auto& [name, bytes] : job->headers) job->job.headers.emplace_back(name, bytes);
  // A job for several archs takes as many free workers as it has archs: its archs compile at
  // once. With no more than one free, it queues whole.
  job->parts = split_by_arch(job->job, m_pool.idle());

  Work<CompileOutput> work;
  work.what = "compile";
  work.parts = job->parts.size();
  // The job's own core and, while no job waits in the queue, every core no other job holds: a
  // split never takes a core a queued job needs. The cubin's bytes do not depend on it.
  work.cpus_when_idle = k_max_job_cpus;
  work.run = [this, job, key](std::size_t i, const std::vector<unsigned>& cpus) {
    CompileJob part = job->parts[i];
    part.cpus = cpus;
    return m_workers.compile(part, key);
  };
  work.merge = [job](std::vector<Expected<CompileOutput>> parts) { return merge_parts(job->job, std::move(parts)); };
  work.entry = [job](const CompileOutput& merged) -> std::optional<std::pair<EntryRecord, std::vector<Image>>> {
    EntryRecord record{job->job.spec.format, job->job.spec.target,
                       static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::seconds>(
                                                      std::chrono::system_clock::now().time_since_epoch())
                                                      .count())};
    return std::make_pair(record, merged.images);
  };
  work.ran = [this, job, key](CompileOutput& merged, const std::vector<Image>&, double seconds) {
    ++m_counters.compiles;
    m_counters.images_compiled += merged.images.size();
    m_activity.compiled(job->job.spec.side, key.hex(), merged.images, seconds);
  };
  work.too_large = [](CompileOutput& merged, const Error& why) { merged.diagnostics.push_back(why.message); };
  return run_once(m_compiles_in_flight, spec.side, key, missing, answer, std::move(work));
}

Expected<std::shared_ptr<const Image>> Cache::get_image(Side side, const Key& key, const ImageRequest& which,
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

remote::Pull Cache::pull(Side side, const Key& key, const std::vector<ImageRequest>* wanted) {
  auto start = Clock::now();
  auto entry = m_remote->read(side, key);
  if (!entry) {
    spdlog::debug("remote read of {:.12} failed: {}", key.hex(), entry.error().message);
    return remote::Pull::unavailable;
  }
  // The whole entry or a miss: an entry with any part refused or missing (its compile's printed
  // text included) is never served in part.
  if (!entry->rejected.empty() || entry->partial) return remote::Pull::miss;
  bool complete = wanted == nullptr
                      ? !entry->images.empty()
                      : std::all_of(wanted->begin(), wanted->end(), [&](const ImageRequest& w) {
                          return std::any_of(entry->images.begin(), entry->images.end(),
                                             [&](const Image& i) { return i.meta.id() == w; });
                        });
  if (!complete) return remote::Pull::miss;
  // Verified (digest and the fleet's HMAC) by the tier. Served from memory at once and written
  // to RocksDB in the background; host images pass the wall's check before anything can read them.
  std::vector<ImageRequest> pulled;
  for (const Image& image : entry->images) pulled.push_back(image.meta.id());
  m_store.put_soon(side, key, entry->record, std::move(entry->images));
  if (side == Side::host && !all_stored(side, key, pulled)) return remote::Pull::miss;  // refused by the host image check (logged)
  m_metrics.observe_tier(Metrics::Tier::remote, std::chrono::duration<double>(Clock::now() - start).count());
  return remote::Pull::hit;
}

bool Cache::read_through(Side side, const Key& key, const std::vector<ImageRequest>* wanted) {
  if (m_remote == nullptr) return false;
  return m_remote->read_through([&] { return pull(side, key, wanted); });
}

Expected<std::vector<ImageMeta>> Cache::lookup(Side side, const Key& key) {
  auto metas = m_store.list(side, key);
  if (metas && metas->empty() && read_through(side, key, nullptr)) metas = m_store.list(side, key);
  return metas;
}

void Cache::fetch_failed(std::string_view key, std::string_view what, const Error& error) {
  ++m_counters.errors;
  m_activity.failed("fetch", key, "", {std::string(what)}, error);
  spdlog::warn("fetch key={:.12} {} code={} error={}", key, what, error_code_name(error.code), error.message);
}

void Cache::refused_fetch(std::string_view key, std::string_view what, const Error& error) {
  ++m_counters.fetches;
  fetch_failed(key, what, error);
}

Expected<SelectedImage> Cache::select(const SelectAsk& ask, Reach reach) {
  auto found = choose(ask, reach);
  if (!found && is_would_block(found.error())) return found;  // asked again, and counted then
  ++m_counters.fetches;
  if (!found) fetch_failed(ask.key, "arch=" + ask.arch, found.error());
  return found;
}

Expected<SelectedImage> Cache::choose(const SelectAsk& ask, Reach reach) {
  auto key = parse_key(ask.key);
  if (!key) return key.error();
  const Side side = ask.side;
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
  if (auto ok = check_cuda_version(ask.driver); !ok) return ok.error();
  std::vector<ImageRequest> candidates;
  for (const ImageMeta& m : *metas) candidates.push_back(m.id());
  // A stated driver passes over what it cannot load; PTX is read for its .version only then.
  CudaVersion toolkit = m_compiler.toolchain().cuda_version;
  std::shared_ptr<const Image> ptx;  // the PTX judged last
  auto ptx_text = [&](std::size_t i) -> Expected<std::string_view> {
    auto image = m_store.get(side, *key, candidates[i], nullptr, reach);
    if (!image) return image.error();  // WOULD_BLOCK ends the selection; any other: passed over
    ptx = std::move(*image);
    return std::string_view(ptx->data);
  };
  auto choice = select_for_driver(side, candidates, ask.arch, ask.kind, ask.driver, toolkit, ptx_text);
  if (!choice) return choice.error();
  if (choice->driver_too_old) {
    return make_error(ErrorCode::k_not_found,
                      "key " + key->hex() + " has no image for " + ask.arch + " that a driver of CUDA " +
                          cuda_version_name(ask.driver) + " loads: it has " + image_list(*metas) + ", made for CUDA " +
                          cuda_version_name(toolkit) + " (PTX ISA " + ptx_isa_name(m_compiler.toolchain().max_ptx_version) +
                          "). Compile the module for this driver (driver_version, --driver " +
                          cuda_version_name(ask.driver) + "): its images have a key of their own");
  }
  if (!choice->chosen) {
    return make_error(ErrorCode::k_not_found, "key " + key->hex() + " has no image that runs on " + ask.arch +
                                                  "; it has " + image_list(*metas));
  }
  const Selection& chosen = *choice->chosen;
  auto image = get_image(side, *key, candidates[chosen.index], reach);
  if (!image) return image.error();
  return SelectedImage{std::move(*image), chosen.needs_jit};
}

Expected<std::shared_ptr<const Image>> Cache::read(Side side, std::string_view key_hex, const ImageRequest& which,
                                                   ReadFor purpose, Reach reach) {
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

}  // namespace kcache::server
