// kcache: the command-line client of kcached (compile, fetch, lookup, stats, key, capabilities).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "cli_common.hpp"
#include "kcache/bundle.hpp"
#include "kcache/client.hpp"
#include "kcache/manifest.hpp"
#include "wire/wire.hpp"

namespace {

using json = nlohmann::json;
namespace v1 = kcache::v1;

using namespace kcache::cli;

// The most bytes of modules and headers a job may send to the daemon of `caps`: its
// --max-module-size (an older daemon that states none has kcached's default).
std::uint64_t module_limit(const v1::Capabilities& caps) {
  std::uint64_t limit = caps.limits().max_module_bytes();
  return limit != 0 ? limit : kcache::k_default_max_module_bytes;
}

// The same, asked of `client`'s daemon before any file is read, so a file too large is refused
// unread. A daemon that does not answer gets kcached's default: the files are still read within a
// bound, and the call that needs the daemon then says why it did not answer; one that ran out the
// --timeout fails here, rather than making the next call wait as long again.
std::uint64_t module_limit(kcache::Client& client) {
  auto caps = client.capabilities();
  if (caps) return module_limit(*caps);
  if (caps.error().code == kcache::ErrorCode::k_deadline_exceeded) fail(caps.error());
  return kcache::k_default_max_module_bytes;
}

v1::CompileRequest build_request(const JobFlags& flags, std::uint64_t max_module_bytes) {
  v1::CompileRequest request;
  JobInput input = flags.read(max_module_bytes);
  kcache::wire::fill_request(input.spec, request);
  kcache::wire::set_modules(input.spec, input.views(), request);
  std::vector<kcache::wire::NamedBytes> headers;
  for (const auto& [name, bytes] : input.headers) headers.push_back({name, bytes});
  kcache::wire::set_headers(headers, request);
  request.set_driver_version(input.driver);
  for (const std::string& a : flags.archs) request.add_archs(a);
  for (kcache::ImageKind kind : flags.kinds()) request.add_emit(kcache::wire::to_proto(kind));
  return request;
}

std::string kind_text(v1::ImageKind kind) {
  auto k = kcache::wire::from_proto(kind);
  return k ? std::string(kcache::kind_name(*k)) : "?";
}

std::string ext_text(v1::ImageKind kind) {
  auto k = kcache::wire::from_proto(kind);
  return k ? std::string(kcache::kind_extension(*k)) : "bin";
}

json image_json(const v1::Image& image, const std::string& path) {
  json j = {{"arch", image.arch()}, {"kind", kind_text(image.kind())}, {"size", image.size()},
            {"sha256", image.sha256()}, {"path", path.empty() ? json(nullptr) : json(path)}};
  if (image.needs_jit()) j["needs_jit"] = true;
  if (image.stubbed_size() > 0) j["stubbed"] = std::vector<std::string>(image.stubbed().begin(), image.stubbed().end());
  if (image.lowered_names_size() > 0) {
    json names = json::object();
    for (const v1::LoweredName& n : image.lowered_names()) names[n.expression()] = n.lowered();
    j["lowered_names"] = names;
  }
  if (image.kernels_size() > 0) {
    json kernels = json::array();
    for (const v1::KernelInfo& k : image.kernels()) {
      json kernel = {{"name", k.name()}, {"registers", k.registers()}, {"shared_bytes", k.shared_bytes()},
                     {"local_bytes", k.local_bytes()}, {"spill_stores", k.spill_stores()},
                     {"spill_loads", k.spill_loads()}};
      if (k.sgprs() != 0) kernel["sgprs"] = k.sgprs();  // AMD: registers are VGPRs, these SGPRs
      kernels.push_back(std::move(kernel));
    }
    j["kernels"] = kernels;
  }
  return j;
}

std::vector<ImageLine> image_lines(const std::vector<const v1::Image*>& images) {
  std::vector<ImageLine> lines;
  for (const v1::Image* im : images) {
    lines.push_back(ImageLine{im->arch(), kcache::wire::from_proto(im->kind()).value_or(kcache::ImageKind::ptx),
                              im->size(), im->sha256(), im->needs_jit()});
  }
  return lines;
}

std::vector<std::string> write_images(const OutputFlags& out, const std::vector<const v1::Image*>& images,
                                      const std::vector<const std::string*>& data) {
  std::vector<std::string_view> bytes;
  for (const std::string* d : data) bytes.emplace_back(*d);
  return kcache::cli::write_images(out, image_lines(images), bytes);
}

std::string outcome_text(v1::Outcome outcome) {
  switch (outcome) {
    case v1::OUTCOME_HIT: return "hit";
    case v1::OUTCOME_MISS: return "miss";
    case v1::OUTCOME_COALESCED: return "coalesced";
    default: return "unknown";
  }
}

void print_images(const std::string& header, const std::vector<const v1::Image*>& images,
                  const std::vector<std::string>& paths) {
  kcache::cli::print_images(header, image_lines(images), paths);
}

// Remembers what the fast path (front.cpp) needs to answer the next compile of this job
// without gRPC: the fingerprint, host triple and HTTP port (one GetCapabilities, after the work).
void remember_server(kcache::Client& client) {
  auto caps = client.capabilities();
  if (!caps) return;
  kcache::save_server_state(client.server(), {caps->fingerprint(), caps->host_triple(), caps->http_port()});
}

int run_compile(kcache::Client& client, const GlobalFlags& g, const JobFlags& job, const OutputFlags& out) {
  v1::CompileRequest request = build_request(job, module_limit(client));
  request.set_digests_only(!out.wants_files());
  auto response = client.compile(request);
  if (!response) fail(response.error());
  std::vector<const v1::Image*> images;
  std::vector<const std::string*> data;
  for (const v1::Image& im : response->images()) {
    images.push_back(&im);
    data.push_back(&im.data());
  }
  auto paths = write_images(out, images, data);
  remember_server(client);
  if (g.json) {
    json j = {{"key", response->key()}, {"outcome", outcome_text(response->outcome())}, {"images", json::array()}};
    for (std::size_t i = 0; i < images.size(); ++i) j["images"].push_back(image_json(*images[i], paths[i]));
    j["diagnostics"] = json(std::vector<std::string>(response->diagnostics().begin(), response->diagnostics().end()));
    std::cout << j.dump() << '\n';
  } else {
    print_images(outcome_text(response->outcome()) + "  " + response->key(), images, paths);
    for (const v1::Image* im : images) {
      for (const std::string& s : im->stubbed()) std::printf("  stubbed for the host: %s\n", s.c_str());
    }
    // Every image of a job lowers its name expressions alike: shown once.
    if (!images.empty()) {
      for (const v1::LoweredName& n : images.front()->lowered_names()) {
        std::printf("  name %s = %s\n", n.expression().c_str(), n.lowered().c_str());
      }
    }
    for (const std::string& d : response->diagnostics()) {
      if (!d.starts_with("stubbed")) std::fprintf(stderr, "warning: %s\n", d.c_str());
    }
  }
  return k_exit_ok;
}

int run_fetch(kcache::Client& client, const GlobalFlags& g, const std::string& key, const std::string& arch,
              const std::string& side, const std::string& kind, const OutputFlags& out) {
  v1::FetchRequest request;
  request.set_key(key);
  request.set_arch(arch);
  request.set_side(kcache::wire::to_proto(*kcache::parse_side(side)));
  if (!kind.empty()) {
    auto k = kcache::parse_kind(kind);
    if (!k) fail(k_exit_usage, "--kind: unknown kind '" + kind + "' (use ptx, cubin or obj)");
    request.set_kind(kcache::wire::to_proto(*k));
  }
  auto fetched = client.fetch(request);
  if (!fetched) fail(fetched.error());
  auto paths = write_images(out, {&fetched->image}, {&fetched->data});
  if (g.json) {
    json j = {{"key", key}, {"outcome", "hit"}, {"images", json::array({image_json(fetched->image, paths[0])})}};
    std::cout << j.dump() << '\n';
  } else {
    print_images("hit  " + key, {&fetched->image}, paths);
  }
  return k_exit_ok;
}

int run_lookup(kcache::Client& client, const GlobalFlags& g, const std::vector<std::string>& keys,
               const std::string& side) {
  v1::LookupRequest request;
  request.set_side(kcache::wire::to_proto(*kcache::parse_side(side)));
  for (const std::string& k : keys) request.add_keys(k);
  auto response = client.lookup(request);
  if (!response) fail(response.error());
  bool all_found = true;
  json results = json::array();
  for (const auto& r : response->results()) {
    all_found = all_found && r.found();
    json images = json::array();
    std::string line;
    for (const v1::Image& im : r.images()) {
      images.push_back(image_json(im, ""));
      line += " " + im.arch() + "." + kind_text(im.kind());
    }
    results.push_back({{"key", r.key()}, {"found", r.found()}, {"images", images}});
    if (!g.json) std::printf("%s  %s%s\n", r.key().c_str(), r.found() ? "found:" : "not found", line.c_str());
  }
  if (g.json) std::cout << json{{"results", results}}.dump() << '\n';
  return all_found ? k_exit_ok : k_exit_not_found;
}

int run_stats(kcache::Client& client, const GlobalFlags& g) {
  auto s = client.stats();
  if (!s) fail(s.error());
  // Every counter the daemon reports, in the proto's order, so a new one shows without a change here.
  const google::protobuf::Descriptor* d = s->GetDescriptor();
  const google::protobuf::Reflection* r = s->GetReflection();
  json j = json::object();
  std::vector<std::pair<std::string, std::uint64_t>> counters;
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->is_repeated() || f->type() != google::protobuf::FieldDescriptor::TYPE_UINT64) continue;
    counters.emplace_back(f->name(), r->GetUInt64(*s, f));
    j[f->name()] = counters.back().second;
  }
  json requests = json::array();
  for (const auto& rc : s->requests()) {
    requests.push_back({{"service", rc.service()}, {"method", rc.method()}, {"code", rc.code()}, {"count", rc.count()}});
  }
  auto buckets_json = [](const auto& buckets) {
    json out = json::array();
    for (const auto& b : buckets) out.push_back({{"le", std::isinf(b.le()) ? json("+Inf") : json(b.le())}, {"count", b.count()}});
    return out;
  };
  std::uint64_t compiles = s->compile_seconds().empty() ? 0 : s->compile_seconds(s->compile_seconds_size() - 1).count();
  j["requests"] = requests;
  j["compile_seconds"] = buckets_json(s->compile_seconds());
  j["compile_seconds_sum"] = s->compile_seconds_sum();
  j["hit_ratio"] = kcache::wire::hit_ratio(*s);
  j["remote"] = s->remote();
  json tiers = json::object();
  for (const auto& t : s->tier_seconds()) tiers[t.tier()] = {{"buckets", buckets_json(t.buckets())}, {"sum", t.sum()}};
  j["tier_seconds"] = tiers;
  if (g.json) {
    std::cout << j.dump() << '\n';
    return k_exit_ok;
  }
  for (const auto& [name, value] : counters) std::printf("%-24s %llu\n", name.c_str(), static_cast<unsigned long long>(value));
  std::printf("%-24s %s\n", "remote", s->remote().empty() ? "none (--remote)" : s->remote().c_str());
  std::printf("%-24s %.2f %% (%llu of %llu compile requests)\n", "hit rate", 100.0 * kcache::wire::hit_ratio(*s),
              static_cast<unsigned long long>(s->hits()),
              static_cast<unsigned long long>(s->hits() + s->misses() + s->coalesced()));
  std::printf("\nrequests (method, status, count):\n");
  for (const auto& rc : s->requests()) {
    std::printf("  %-16s %-20s %llu\n", rc.method().c_str(), rc.code().c_str(),
                static_cast<unsigned long long>(rc.count()));
  }
  std::printf("\nanswers by tier (count, mean):\n");
  for (const auto& t : s->tier_seconds()) {
    std::uint64_t n = t.buckets().empty() ? 0 : t.buckets(t.buckets_size() - 1).count();
    if (n == 0) {
      std::printf("  %-8s 0\n", t.tier().c_str());
    } else {
      std::printf("  %-8s %llu, %.3f ms\n", t.tier().c_str(), static_cast<unsigned long long>(n),
                  1000.0 * t.sum() / static_cast<double>(n));
    }
  }
  if (compiles > 0) {
    std::printf("\ncompile time: %llu compiles, %.3f s on average; share within each bound:\n",
                static_cast<unsigned long long>(compiles), s->compile_seconds_sum() / static_cast<double>(compiles));
    for (const auto& b : s->compile_seconds()) {
      std::string bound = std::isinf(b.le()) ? "+Inf" : std::to_string(b.le()).substr(0, 5) + " s";
      std::printf("  <= %-8s %5.1f%%\n", bound.c_str(), 100.0 * static_cast<double>(b.count()) / static_cast<double>(compiles));
    }
  }
  return k_exit_ok;
}

int run_key(kcache::Client& client, const GlobalFlags& g, const JobFlags& job) {
  v1::CompileRequest request = build_request(job, module_limit(client));
  auto key = client.compute_key(request);
  if (!key) fail(key.error());
  remember_server(client);
  if (g.json) {
    auto caps = client.capabilities();
    std::cout << json{{"key", key->hex()}, {"fingerprint", caps->fingerprint()}}.dump() << '\n';
  } else {
    std::printf("%s\n", key->hex().c_str());
  }
  return k_exit_ok;
}

// The job flags of one checked manifest module, paths relative to the manifest's folder.
JobFlags job_from_manifest(const kcache::ManifestModule& m, const std::filesystem::path& base,
                           const std::vector<std::string>& archs) {
  JobFlags f;
  f.files = {(base / m.path).string()};
  for (const std::string& linked : m.link) f.files.push_back((base / linked).string());
  f.side = kcache::side_name(m.side);
  f.format = m.format ? std::string(kcache::format_name(*m.format)) : "";
  f.target = m.target;
  f.opt_level = m.opt_level;
  f.debug = m.debug;
  f.lineinfo = m.lineinfo;
  f.fast_math = m.fast_math;
  f.entries = m.entry_points;
  f.cpu = m.cpu;
  f.guard = m.host_runtime == kcache::HostGuard::stub ? "stub" : "reject";
  for (kcache::ImageKind kind : m.emit) f.emit.emplace_back(kcache::kind_name(kind));
  if (m.side == kcache::Side::device) f.archs = archs;
  for (const std::string& dir : m.include_dirs) f.include_dirs.push_back((base / dir).string());
  f.defines = m.defines;
  f.undefines = m.undefines;
  f.std = m.std;
  f.name_exprs = m.name_expressions;
  f.nvrtc_options = m.nvrtc_options;
  return f;
}

int run_precompile(kcache::Client& client, const GlobalFlags& g, const std::string& manifest_path,
                   std::vector<std::string> archs, const std::string& out, unsigned jobs, const std::string& driver) {
  kcache::CudaVersion driver_version = parse_driver_flag(driver);
  std::string text = read_file(manifest_path, {kcache::k_max_manifest_bytes, "kcache's limit on a manifest"});
  auto manifest = kcache::parse_manifest(text, kcache::manifest_syntax_of(manifest_path));
  if (!manifest) fail(k_exit_usage, manifest_path + ": " + manifest.error().message);
  if (archs.empty()) archs = manifest->archs;
  const std::vector<kcache::ManifestModule>& modules = manifest->modules;
  std::filesystem::path base = std::filesystem::path(manifest_path).parent_path();
  make_directories(std::filesystem::path(out) / "images");
  auto caps = client.capabilities();
  if (!caps) fail(caps.error());
  const std::uint64_t max_module_bytes = module_limit(*caps);

  std::vector<kcache::BundleEntry> entries(modules.size());
  std::vector<std::string> errors(modules.size());
  std::atomic<std::size_t> next{0}, done{0};
  std::mutex print_mutex;  // guards the progress output
  bool tty = isatty(STDERR_FILENO) != 0;
  auto work = [&] {
    for (std::size_t i = next++; i < modules.size(); i = next++) {
      const std::string& name = modules[i].path;
      try {
        JobFlags flags = job_from_manifest(modules[i], base, archs);
        flags.driver = driver;
        auto response = client.compile(build_request(flags, max_module_bytes));
        if (!response) fail(response.error());
        kcache::BundleEntry& e = entries[i];
        e.module = name;
        e.key = response->key();
        e.side = modules[i].side;
        // The bundle's file names come from the daemon's reply: plain names only.
        check_file_name("the daemon's key", e.key);
        for (const v1::Image& im : response->images()) check_file_name("the daemon's image arch", im.arch());
        for (const v1::Image& im : response->images()) {
          std::string file = "images/" + e.key + "." + im.arch() + "." + ext_text(im.kind());
          write_file(std::filesystem::path(out) / file, im.data());
          kcache::BundleImage b{{im.arch(), *kcache::wire::from_proto(im.kind())}, im.size(), im.sha256(), file, {}, {}};
          for (const v1::KernelInfo& k : im.kernels()) b.kernels.push_back(k.name());
          for (const v1::LoweredName& n : im.lowered_names()) b.lowered_names.emplace_back(n.expression(), n.lowered());
          e.images.push_back(std::move(b));
        }
      } catch (const Failure& f) {
        errors[i] = f.message;
      } catch (const std::exception& e) {  // nothing may leave a thread: that would abort
        errors[i] = std::string("internal error: ") + e.what();
      }
      std::size_t n = ++done;
      std::lock_guard lock(print_mutex);
      if (tty) {
        int width = 30, filled = static_cast<int>(width * n / modules.size());
        std::fprintf(stderr, "\r[%s%s] %zu/%zu %-40.40s", std::string(filled, '#').c_str(),
                     std::string(width - filled, '.').c_str(), n, modules.size(), name.c_str());
      } else {
        std::fprintf(stderr, "precompiled %zu/%zu %s%s\n", n, modules.size(), name.c_str(),
                     errors[i].empty() ? "" : " FAILED");
      }
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(1u, jobs); ++t) threads.emplace_back(work);
  for (std::thread& t : threads) t.join();
  if (tty) std::fprintf(stderr, "\n");

  std::size_t failed = 0, images = 0;
  for (std::size_t i = 0; i < modules.size(); ++i) {
    if (!errors[i].empty()) {
      ++failed;
      std::fprintf(stderr, "kcache: %s: %s\n", modules[i].path.c_str(), errors[i].c_str());
    }
    images += entries[i].images.size();
  }
  if (failed > 0) fail(k_exit_bad_input, std::to_string(failed) + " of " + std::to_string(modules.size()) + " modules failed; no bundle index written");
  kcache::BundleIndex index{caps->fingerprint(), std::move(entries), caps->cuda_version(), driver_version};
  if (auto written = kcache::write_bundle_index(out, index); !written) fail(written.error());
  if (g.json) {
    std::cout << json{{"bundle", out}, {"modules", modules.size()}, {"images", images}}.dump() << '\n';
  } else {
    std::printf("bundle %s: %zu modules, %zu images\n", out.c_str(), modules.size(), images);
  }
  return k_exit_ok;
}

// A bundle's failure: NOT_FOUND (no bundle, no such key, no image for the arch) exits 4; every
// other is a refusal of the bundle (a bad index, an image file that is not what the index says,
// whatever its code) and exits 3, bad input.
[[noreturn]] void fail_bundle(const kcache::Error& e) {
  fail(e.code == kcache::ErrorCode::k_not_found ? k_exit_not_found : k_exit_bad_input, e);
}

int run_bundle_fetch(const GlobalFlags& g, const std::string& dir, const std::string& key, const std::string& arch,
                     const std::string& kind, const std::string& driver, const OutputFlags& out) {
  kcache::CudaVersion driver_version = parse_driver_flag(driver);
  auto bundle = kcache::Bundle::open(dir);
  if (!bundle) fail_bundle(bundle.error());
  std::optional<kcache::ImageKind> only;
  if (!kind.empty()) {
    only = kcache::parse_kind(kind);
    if (!only) fail(k_exit_usage, "--kind: unknown kind '" + kind + "' (use ptx, cubin or obj)");
  }
  auto found = bundle->fetch(key, arch, only, driver_version);
  if (!found) fail_bundle(found.error());
  v1::Image image;
  image.set_arch(found->image.id.arch);
  image.set_kind(kcache::wire::to_proto(found->image.id.kind));
  image.set_size(found->image.size);
  image.set_sha256(found->image.sha256);
  image.set_needs_jit(found->needs_jit);
  auto paths = write_images(out, {&image}, {&found->data});
  if (g.json) {
    std::cout << json{{"key", key}, {"outcome", "hit"}, {"images", json::array({image_json(image, paths[0])})}}.dump()
              << '\n';
  } else {
    print_images("hit (bundle)  " + key, {&image}, paths);
  }
  return k_exit_ok;
}

int run_capabilities(kcache::Client& client, const GlobalFlags& g) {
  auto caps = client.capabilities();
  if (!caps) fail(caps.error());
  json j = {{"fingerprint", caps->fingerprint()},
            {"key_format_version", caps->key_format_version()},
            {"server_version", caps->server_version()},
            {"llvm_version", caps->llvm_version()},
            {"cuda_present", caps->cuda_present()},
            {"ptxas_version", caps->ptxas_version()},
            {"rtlib_digest", caps->rtlib_digest()},
            {"host_triple", caps->host_triple()},
            {"device_archs", std::vector<std::string>(caps->device_archs().begin(), caps->device_archs().end())},
            {"cubin_archs", std::vector<std::string>(caps->cubin_archs().begin(), caps->cubin_archs().end())},
            {"ptx_isa_version", caps->ptx_isa_version()},
            {"cuda_version", caps->cuda_version() != 0 ? kcache::cuda_version_name(caps->cuda_version()) : ""},
            {"libdevice_present", caps->libdevice_present()},
            {"cubin_assembler", caps->cubin_assembler()},
            {"amd_archs", std::vector<std::string>(caps->amd_archs().begin(), caps->amd_archs().end())},
            {"lld_version", caps->lld_version()},
            {"rocm_device_libs", caps->rocm_device_libs()},
            {"max_module_bytes", caps->limits().max_module_bytes()},
            {"max_archs", caps->limits().max_archs()},
            {"max_store_bytes", caps->limits().max_store_bytes()}};
  std::cout << (g.json ? j.dump() : j.dump(2)) << '\n';
  return k_exit_ok;
}

int run_verify(kcache::Client& client, const GlobalFlags& g, bool repair) {
  auto r = client.verify(repair);
  if (!r) fail(r.error());
  json problems = json::array();
  for (const auto& p : r->problems()) {
    problems.push_back({{"side", p.side() == kcache::v1::SIDE_HOST ? "host" : "device"}, {"key", p.key()},
                        {"what", p.what()}});
    if (!g.json) std::printf("bad %s entry %s: %s\n", p.side() == kcache::v1::SIDE_HOST ? "host" : "device",
                             p.key().empty() ? "?" : p.key().c_str(), p.what().c_str());
  }
  if (g.json) {
    std::cout << json{{"entries", r->entries()}, {"images", r->images()},     {"bytes", r->bytes()},
                      {"problems", problems},    {"removed", r->removed()},   {"counters_wrong", r->counters_wrong()}}
                     .dump()
              << '\n';
  } else {
    std::printf("%llu good entries, %llu images, %llu bytes; %d bad, %llu removed%s\n",
                static_cast<unsigned long long>(r->entries()), static_cast<unsigned long long>(r->images()),
                static_cast<unsigned long long>(r->bytes()), r->problems_size(),
                static_cast<unsigned long long>(r->removed()),
                r->counters_wrong() ? "; usage counters disagreed" : "");
  }
  return r->problems().empty() && !r->counters_wrong() ? k_exit_ok : k_exit_error;
}

int run_evict(kcache::Client& client, const GlobalFlags& g, const std::vector<std::string>& keys,
              const std::string& side, const std::string& to) {
  kcache::v1::EvictRequest request;
  request.set_side(side == "host" ? kcache::v1::SIDE_HOST : kcache::v1::SIDE_DEVICE);
  for (const std::string& k : keys) request.add_keys(k);
  if (!to.empty()) {
    auto bytes = kcache::parse_size(to);
    if (!bytes) fail(k_exit_usage, "--to '" + to + "' is not a size: use bytes, or a number with K, M, G or T");
    request.set_target_bytes(*bytes);
  }
  if (keys.empty() && to.empty()) fail(k_exit_usage, "evict: name KEYs, or --to SIZE");
  auto r = client.evict(request);
  if (!r) fail(r.error());
  if (g.json) std::cout << json{{"evicted", r->evicted()}, {"bytes", r->bytes()}}.dump() << '\n';
  else std::printf("evicted %llu entries; %llu bytes stored\n", static_cast<unsigned long long>(r->evicted()),
                   static_cast<unsigned long long>(r->bytes()));
  return k_exit_ok;
}

int run_purge(kcache::Client& client, const GlobalFlags& g) {
  auto r = client.purge();
  if (!r) fail(r.error());
  if (g.json) std::cout << json{{"evicted", r->evicted()}}.dump() << '\n';
  else std::printf("purged %llu entries\n", static_cast<unsigned long long>(r->evicted()));
  return k_exit_ok;
}

// Prints a failure (stderr, and the JSON object with --json); returns its exit code.
int report_failure(const GlobalFlags& g, const Failure& f) {
  if (g.json) {
    json j = {{"error", f.message}, {"exit_code", f.code}};
    if (!f.report.empty()) j["report"] = f.report;
    // Messages can quote bytes from files and replies: invalid UTF-8 is replaced, never thrown.
    std::cout << j.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
  }
  std::fprintf(stderr, "kcache: %s\n", f.message.c_str());
  for (const std::string& line : f.report) std::fprintf(stderr, "  %s\n", line.c_str());
  return f.code;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kcache: client of the kcached GPU compile cache", "kcache"};
  app.footer(k_exit_help);
  app.require_subcommand(1);
  GlobalFlags g;
  g.add_to(app);

  JobFlags compile_job, key_job;
  OutputFlags compile_out, fetch_out;
  auto* compile = app.add_subcommand("compile", "Compile a module (or get it from the cache)");
  compile_job.add_to(*compile);
  compile_out.add_to(*compile);

  std::string fetch_key, fetch_arch, fetch_side = "device", fetch_kind;
  auto* fetch = app.add_subcommand("fetch", "Fetch the best stored image of KEY for a device arch");
  fetch->add_option("KEY", fetch_key, "Key (64 hex digits)")->required();
  fetch->add_option("--arch", fetch_arch,
                    "The device's arch (sm_90, or its AMD target ID gfx90a:sramecc+:xnack-), or the host CPU arch "
                    "(x86_64)")
      ->required();
  fetch->add_option("--side", fetch_side, "device or host")->check(CLI::IsMember({"device", "host"}));
  fetch->add_option("--kind", fetch_kind, "Only this kind: ptx, cubin, ltoir, hsaco, amdgcn or obj");
  fetch_out.add_to(*fetch);

  std::vector<std::string> lookup_keys;
  std::string lookup_side = "device";
  auto* lookup = app.add_subcommand("lookup", "Say which keys are stored, and their images (exit 4 if any is not)");
  lookup->add_option("KEY", lookup_keys, "Keys (64 hex digits)")->required();
  lookup->add_option("--side", lookup_side, "device or host")->check(CLI::IsMember({"device", "host"}));

  auto* stats = app.add_subcommand("stats", "Show the daemon's counters");
  auto* key = app.add_subcommand("key", "Print the key of a job (asks the daemon only for its fingerprint)");
  key_job.add_to(*key);
  auto* caps = app.add_subcommand("capabilities", "Show the daemon's toolchain and limits");
  auto* health = app.add_subcommand("health", "gRPC health check (no token needed): exit 0 serving, 5 not");

  std::string manifest, bundle_out;
  std::vector<std::string> precompile_archs;
  unsigned precompile_jobs = 4;
  auto* precompile = app.add_subcommand("precompile", "Compile every module of a manifest (JSON or TOML) into a bundle");
  precompile->add_option("MANIFEST", manifest,
                         "JSON: {\"archs\": [...], \"modules\": [{\"path\": ..., options}]}, or the same in a .toml file")
      ->required();
  precompile->add_option("--arch", precompile_archs, "GPU archs, comma-separated (default: the manifest's)")
      ->delimiter(',');
  precompile->add_option("--out", bundle_out, "Bundle folder")->required();
  precompile->add_option("-j,--jobs", precompile_jobs, "Modules compiled at once")->capture_default_str();
  std::string precompile_driver, bundle_driver;
  precompile->add_option("--driver", precompile_driver,
                         "CUDA version of the drivers that will load the bundle (12.4): PTX they JIT, no cubins they "
                         "cannot load");

  std::string bundle_dir, bundle_key, bundle_arch, bundle_kind;
  OutputFlags bundle_fetch_out;
  auto* bundle_fetch = app.add_subcommand("bundle-fetch", "Serve an image from a bundle, with no daemon");
  bundle_fetch->add_option("BUNDLE", bundle_dir, "Bundle folder")->required();
  bundle_fetch->add_option("KEY", bundle_key, "Key (64 hex digits)")->required();
  bundle_fetch->add_option("--arch", bundle_arch,
                           "The device's arch (sm_90, or its AMD target ID gfx90a:sramecc+:xnack-), or the host CPU arch")
      ->required();
  bundle_fetch->add_option("--kind", bundle_kind, "Only this kind: ptx, cubin, ltoir, hsaco, amdgcn or obj");
  bundle_fetch->add_option("--driver", bundle_driver,
                           "CUDA version of the driver that will load the image (12.4): only an image it loads");
  bundle_fetch_out.add_to(*bundle_fetch);

  bool repair = false;
  auto* verify = app.add_subcommand("verify", "Check every stored entry (admin); exit 1 if any is bad");
  verify->add_flag("--repair", repair, "Remove bad entries and fix the usage counters");
  std::vector<std::string> evict_keys;
  std::string evict_side = "device", evict_to;
  auto* evict = app.add_subcommand("evict", "Remove entries (admin): the KEYs named, and/or LRU down to --to");
  evict->add_option("KEY", evict_keys, "Keys (64 hex digits)");
  evict->add_option("--side", evict_side, "device or host")->check(CLI::IsMember({"device", "host"}));
  evict->add_option("--to", evict_to, "Evict least recently used entries down to this many bytes (K/M/G)");
  bool purge_yes = false;
  auto* purge = app.add_subcommand("purge", "Remove every entry (admin)");
  purge->add_flag("--yes", purge_yes, "Yes, remove everything")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? k_exit_ok : k_exit_usage;
  }

  kcache::ClientOptions options;
  options.tls = g.wants_tls();
  options.tls_ca_file = g.tls_ca_file;
  options.tls_cert_file = g.tls_cert_file;
  options.tls_key_file = g.tls_key_file;
  auto token = kcache::resolve_token(g.token_file);
  if (!token) {
    std::fprintf(stderr, "kcache: %s\n", token.error().message.c_str());
    return k_exit_usage;
  }
  options.token = *token;
  options.server = kcache::resolve_server(g.server);
  options.deadline = std::chrono::milliseconds(static_cast<long long>(g.timeout_s * 1000));
  // A third of a second of retries (50, 100, 200 ms) rides out a daemon being restarted or a
  // connection refused once under load; one that is down is still reported at once.
  options.max_attempts = 4;
  kcache::Client client(options);
  try {
    if (*compile) return run_compile(client, g, compile_job, compile_out);
    if (*fetch) return run_fetch(client, g, fetch_key, fetch_arch, fetch_side, fetch_kind, fetch_out);
    if (*lookup) return run_lookup(client, g, lookup_keys, lookup_side);
    if (*stats) return run_stats(client, g);
    if (*key) return run_key(client, g, key_job);
    if (*caps) return run_capabilities(client, g);
    if (*health) {
      auto ok = client.health();
      if (!ok) fail(ok.error());
      if (g.json) std::cout << json{{"status", "SERVING"}}.dump() << '\n';
      else std::printf("SERVING\n");
      return k_exit_ok;
    }
    if (*precompile) return run_precompile(client, g, manifest, precompile_archs, bundle_out, precompile_jobs, precompile_driver);
    if (*verify) return run_verify(client, g, repair);
    if (*evict) return run_evict(client, g, evict_keys, evict_side, evict_to);
    if (*purge) return run_purge(client, g);
    if (*bundle_fetch) return run_bundle_fetch(g, bundle_dir, bundle_key, bundle_arch, bundle_kind, bundle_driver, bundle_fetch_out);
  } catch (const Failure& f) {
    return report_failure(g, f);
  } catch (const std::exception& e) {
    // Every expected failure is a Failure; anything else is a bug, still reported, never an abort.
    return report_failure(g, Failure{k_exit_error, std::string("internal error: ") + e.what(), {}});
  }
  return k_exit_usage;
}
