#include "output.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "endpoint.hpp"
#include "kcache/driver.hpp"
#include "wire/wire.hpp"

namespace kcache::cli {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string kind_text(v1::ImageKind kind) {
  auto k = wire::from_proto(kind);
  return k ? std::string(kind_name(*k)) : "?";
}

void print_json(const json& j) { std::cout << j.dump() << '\n'; }

}  // namespace

std::string outcome_text(v1::Outcome outcome) {
  // kcache::Outcome has kcache.v1.Outcome's values.
  if (outcome != v1::OUTCOME_HIT && outcome != v1::OUTCOME_MISS && outcome != v1::OUTCOME_COALESCED) return "unknown";
  return std::string(outcome_name(static_cast<Outcome>(outcome)));
}

std::vector<ImageLine> image_lines(const std::vector<const v1::Image*>& images) {
  std::vector<ImageLine> lines;
  for (const v1::Image* im : images) {
    lines.push_back(ImageLine{im->arch(), wire::from_proto(im->kind()).value_or(ImageKind::ptx), im->size(),
                              im->sha256(), im->needs_jit()});
  }
  return lines;
}

std::vector<std::string> write_images(const OutputFlags& out, const std::vector<const v1::Image*>& images,
                                      const std::vector<const std::string*>& data) {
  std::vector<std::string_view> bytes;
  for (const std::string* d : data) bytes.emplace_back(*d);
  return write_images(out, image_lines(images), bytes);
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

void print_compiled(const GlobalFlags& g, const v1::CompileResponse& response, const std::vector<std::string>& paths) {
  std::vector<const v1::Image*> images;
  for (const v1::Image& im : response.images()) images.push_back(&im);
  if (g.json) {
    json j = {{"key", response.key()}, {"outcome", outcome_text(response.outcome())}, {"images", json::array()}};
    for (std::size_t i = 0; i < images.size(); ++i) j["images"].push_back(image_json(*images[i], paths[i]));
    j["diagnostics"] = json(std::vector<std::string>(response.diagnostics().begin(), response.diagnostics().end()));
    print_json(j);
    return;
  }
  print_images(outcome_text(response.outcome()) + "  " + response.key(), image_lines(images), paths);
  for (const v1::Image* im : images) print_stubbed(std::vector<std::string>(im->stubbed().begin(), im->stubbed().end()));
  // Every image of a job lowers its name expressions alike: shown once.
  if (!images.empty()) {
    for (const v1::LoweredName& n : images.front()->lowered_names()) {
      std::printf("  name %s = %s\n", n.expression().c_str(), n.lowered().c_str());
    }
  }
  for (const std::string& d : response.diagnostics()) {
    if (!d.starts_with("stubbed")) std::fprintf(stderr, "warning: %s\n", d.c_str());
  }
}

void print_served(const GlobalFlags& g, const std::string& how, const std::string& key, const v1::Image& image,
                  const std::string& path) {
  if (g.json) {
    print_json({{"key", key},
                {"outcome", std::string(outcome_name(Outcome::hit))},
                {"images", json::array({image_json(image, path)})}});
  } else {
    print_images(how + "  " + key, image_lines({&image}), {path});
  }
}

void print_lookup(const GlobalFlags& g, const v1::LookupResponse& response) {
  json results = json::array();
  for (const auto& r : response.results()) {
    json images = json::array();
    std::string line;
    for (const v1::Image& im : r.images()) {
      images.push_back(image_json(im, ""));
      line += " " + im.arch() + "." + kind_text(im.kind());
    }
    results.push_back({{"key", r.key()}, {"found", r.found()}, {"images", images}});
    if (!g.json) std::printf("%s  %s%s\n", r.key().c_str(), r.found() ? "found:" : "not found", line.c_str());
  }
  if (g.json) print_json({{"results", results}});
}

void print_key(const GlobalFlags& g, const std::string& key, const std::string& fingerprint) {
  if (g.json) {
    print_json({{"key", key}, {"fingerprint", fingerprint}});
  } else {
    std::printf("%s\n", key.c_str());
  }
}

void print_stats(const GlobalFlags& g, const v1::Stats& s) {
  // Every counter the daemon reports, in the proto's order, so a new one shows without a change here.
  const google::protobuf::Descriptor* d = s.GetDescriptor();
  const google::protobuf::Reflection* r = s.GetReflection();
  json j = json::object();
  std::vector<std::pair<std::string, std::uint64_t>> counters;
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* f = d->field(i);
    if (f->is_repeated() || f->type() != google::protobuf::FieldDescriptor::TYPE_UINT64) continue;
    counters.emplace_back(f->name(), r->GetUInt64(s, f));
    j[f->name()] = counters.back().second;
  }
  json requests = json::array();
  for (const auto& rc : s.requests()) {
    requests.push_back({{"service", rc.service()}, {"method", rc.method()}, {"code", rc.code()}, {"count", rc.count()}});
  }
  auto buckets_json = [](const auto& buckets) {
    json out = json::array();
    for (const auto& b : buckets) out.push_back({{"le", std::isinf(b.le()) ? json("+Inf") : json(b.le())}, {"count", b.count()}});
    return out;
  };
  std::uint64_t compiles = s.compile_seconds().empty() ? 0 : s.compile_seconds(s.compile_seconds_size() - 1).count();
  j["requests"] = requests;
  j["compile_seconds"] = buckets_json(s.compile_seconds());
  j["compile_seconds_sum"] = s.compile_seconds_sum();
  j["hit_ratio"] = wire::hit_ratio(s);
  j["remote"] = s.remote();
  j["jail"] = {{"mode", s.jail()}, {"reason", s.jail_reason()}, {"steps_unjailed", s.steps_unjailed()}};
  json tiers = json::object();
  for (const auto& t : s.tier_seconds()) tiers[t.tier()] = {{"buckets", buckets_json(t.buckets())}, {"sum", t.sum()}};
  j["tier_seconds"] = tiers;
  json steps = json::object();
  for (const auto& st : s.steps()) {
    steps[st.tool()] = {{"hits", st.hits()},     {"misses", st.misses()}, {"coalesced", st.coalesced()},
                        {"stored", st.stored()}, {"failed", st.failed()}};
  }
  j["steps"] = steps;
  json uncacheable = json::object();
  for (const auto& rc : s.uncacheable()) uncacheable[rc.reason()] = rc.count();
  j["uncacheable"] = uncacheable;
  // This machine's launcher (kcache nvcc ...), from its own counters.
  json launcher = json::object();
  if (fs::path dir = kcache::state_dir(); !dir.empty()) {
    std::ifstream in(dir / "launcher-stats");
    std::string name;
    unsigned long long count = 0;
    while (in >> name >> count) launcher[name] = count;
  }
  j["launcher"] = launcher;
  if (g.json) {
    print_json(j);
    return;
  }
  for (const auto& [name, value] : counters) std::printf("%-24s %llu\n", name.c_str(), static_cast<unsigned long long>(value));
  std::printf("%-24s %s\n", "remote", s.remote().empty() ? "none (--remote)" : s.remote().c_str());
  std::string jail = s.jail() != "none" ? s.jail()
                     : "none (" + s.jail_reason() + "): build steps " +
                           (s.steps_unjailed() ? "run unjailed (--allow-unjailed-steps)" : "refused");
  std::printf("%-24s %s\n", "jail", jail.c_str());
  std::printf("%-24s %.2f %% (%llu of %llu requests: compiles and build steps)\n", "hit rate", 100.0 * wire::hit_ratio(s),
              static_cast<unsigned long long>(s.hits()),
              static_cast<unsigned long long>(s.hits() + s.misses() + s.coalesced()));
  std::printf("\nrequests (method, status, count):\n");
  for (const auto& rc : s.requests()) {
    std::printf("  %-16s %-20s %llu\n", rc.method().c_str(), rc.code().c_str(),
                static_cast<unsigned long long>(rc.count()));
  }
  std::printf("\nanswers by tier (count, mean):\n");
  for (const auto& t : s.tier_seconds()) {
    std::uint64_t n = t.buckets().empty() ? 0 : t.buckets(t.buckets_size() - 1).count();
    if (n == 0) {
      std::printf("  %-8s 0\n", t.tier().c_str());
    } else {
      std::printf("  %-8s %llu, %.3f ms\n", t.tier().c_str(), static_cast<unsigned long long>(n),
                  1000.0 * t.sum() / static_cast<double>(n));
    }
  }
  std::printf("\nbuild steps (tool: hits, misses, coalesced, host objects stored, failed):\n");
  for (const auto& st : s.steps()) {
    std::printf("  %-8s %llu, %llu, %llu, %llu, %llu\n", st.tool().c_str(), static_cast<unsigned long long>(st.hits()),
                static_cast<unsigned long long>(st.misses()), static_cast<unsigned long long>(st.coalesced()),
                static_cast<unsigned long long>(st.stored()), static_cast<unsigned long long>(st.failed()));
  }
  if (!s.uncacheable().empty()) {
    std::printf("\ncompiles launchers ran without the cache, by reason:\n");
    for (const auto& rc : s.uncacheable()) {
      std::printf("  %-32s %llu\n", rc.reason().c_str(), static_cast<unsigned long long>(rc.count()));
    }
  }
  if (!launcher.empty()) {
    std::printf("\nthis machine's launcher (%s):\n", (kcache::state_dir() / "launcher-stats").c_str());
    for (const auto& [name, count] : launcher.items()) {
      std::printf("  %-32s %llu\n", name.c_str(), count.get<unsigned long long>());
    }
  }
  if (compiles > 0) {
    std::printf("\ncompile time: %llu compiles, %.3f s on average; share within each bound:\n",
                static_cast<unsigned long long>(compiles), s.compile_seconds_sum() / static_cast<double>(compiles));
    for (const auto& b : s.compile_seconds()) {
      std::string bound = std::isinf(b.le()) ? "+Inf" : std::to_string(b.le()).substr(0, 5) + " s";
      std::printf("  <= %-8s %5.1f%%\n", bound.c_str(), 100.0 * static_cast<double>(b.count()) / static_cast<double>(compiles));
    }
  }
}

void print_capabilities(const GlobalFlags& g, const v1::Capabilities& caps) {
  json j = {{"fingerprint", caps.fingerprint()},
            {"key_format_version", caps.key_format_version()},
            {"server_version", caps.server_version()},
            {"llvm_version", caps.llvm_version()},
            {"cuda_present", caps.cuda_present()},
            {"ptxas_version", caps.ptxas_version()},
            {"rtlib_digest", caps.rtlib_digest()},
            {"host_triple", caps.host_triple()},
            {"device_archs", std::vector<std::string>(caps.device_archs().begin(), caps.device_archs().end())},
            {"cubin_archs", std::vector<std::string>(caps.cubin_archs().begin(), caps.cubin_archs().end())},
            {"ptx_isa_version", caps.ptx_isa_version()},
            {"cuda_version", caps.cuda_version() != 0 ? cuda_version_name(caps.cuda_version()) : ""},
            {"libdevice_present", caps.libdevice_present()},
            {"cubin_assembler", caps.cubin_assembler()},
            {"amd_archs", std::vector<std::string>(caps.amd_archs().begin(), caps.amd_archs().end())},
            {"lld_version", caps.lld_version()},
            {"rocm_device_libs", caps.rocm_device_libs()},
            {"max_module_bytes", caps.limits().max_module_bytes()},
            {"max_archs", caps.limits().max_archs()},
            {"max_store_bytes", caps.limits().max_store_bytes()}};
  std::cout << (g.json ? j.dump() : j.dump(2)) << '\n';
}

void print_verified(const GlobalFlags& g, const v1::VerifyResponse& r) {
  json problems = json::array();
  for (const auto& p : r.problems()) {
    const char* side = p.side() == v1::SIDE_HOST ? "host" : "device";
    problems.push_back({{"side", side}, {"key", p.key()}, {"what", p.what()}});
    if (!g.json) std::printf("bad %s entry %s: %s\n", side, p.key().empty() ? "?" : p.key().c_str(), p.what().c_str());
  }
  if (g.json) {
    print_json({{"entries", r.entries()}, {"images", r.images()},   {"bytes", r.bytes()},
                {"problems", problems},   {"removed", r.removed()}, {"counters_wrong", r.counters_wrong()}});
  } else {
    std::printf("%llu good entries, %llu images, %llu bytes; %d bad, %llu removed%s\n",
                static_cast<unsigned long long>(r.entries()), static_cast<unsigned long long>(r.images()),
                static_cast<unsigned long long>(r.bytes()), r.problems_size(),
                static_cast<unsigned long long>(r.removed()), r.counters_wrong() ? "; usage counters disagreed" : "");
  }
}

void print_evicted(const GlobalFlags& g, const v1::EvictResponse& r) {
  if (g.json) {
    print_json({{"evicted", r.evicted()}, {"bytes", r.bytes()}});
  } else {
    std::printf("evicted %llu entries; %llu bytes stored\n", static_cast<unsigned long long>(r.evicted()),
                static_cast<unsigned long long>(r.bytes()));
  }
}

void print_purged(const GlobalFlags& g, const v1::PurgeResponse& r) {
  if (g.json) {
    print_json({{"evicted", r.evicted()}});
  } else {
    std::printf("purged %llu entries\n", static_cast<unsigned long long>(r.evicted()));
  }
}

void print_serving(const GlobalFlags& g) {
  if (g.json) {
    print_json({{"status", "SERVING"}});
  } else {
    std::printf("SERVING\n");
  }
}

void print_bundle(const GlobalFlags& g, const std::string& dir, std::size_t modules, std::size_t images) {
  if (g.json) {
    print_json({{"bundle", dir}, {"modules", modules}, {"images", images}});
  } else {
    std::printf("bundle %s: %zu modules, %zu images\n", dir.c_str(), modules, images);
  }
}

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

Progress::Progress(std::size_t total) : m_total(total), m_tty(isatty(STDERR_FILENO) != 0) {}

void Progress::done(const std::string& name, bool failed) {
  std::lock_guard lock(m_mutex);
  std::size_t n = ++m_done;
  if (m_tty) {
    int width = 30, filled = static_cast<int>(width * n / m_total);
    std::fprintf(stderr, "\r[%s%s] %zu/%zu %-40.40s", std::string(filled, '#').c_str(),
                 std::string(width - filled, '.').c_str(), n, m_total, name.c_str());
  } else {
    std::fprintf(stderr, "precompiled %zu/%zu %s%s\n", n, m_total, name.c_str(), failed ? " FAILED" : "");
  }
}

void Progress::finish() {
  if (m_tty) std::fprintf(stderr, "\n");
}

}  // namespace kcache::cli
