// kcache-grpc: the command-line client of kcached (compile, fetch, lookup, stats, key,
// capabilities, precompile, bundle-fetch and the admin calls). This file holds the command table
// and what each command asks; output.cpp prints the answers, bundle_writer.cpp writes bundles.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <thread>

#include "bundle_writer.hpp"
#include "cli_common.hpp"
#include "endpoint.hpp"
#include "kcache/bundle.hpp"
#include "kcache/client.hpp"
#include "kcache/client_job.hpp"
#include "kcache/version.hpp"
#include "launcher/launcher.hpp"
#include "manifest.hpp"
#include "output.hpp"
#include "wire/wire.hpp"

namespace {

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

// The request for a job read from its files.
v1::CompileRequest build_request(const JobInput& input) {
  kcache::ClientJob job{input.spec, input.views(), {}, input.archs, input.kinds, input.driver};
  for (const auto& [name, bytes] : input.headers) job.headers.emplace_back(name, bytes);
  return kcache::compile_request(job);
}

// An image the daemon did not send as v1::Image (a bundle's), for output.
v1::Image image_of(const kcache::BundleImage& b, bool needs_jit) {
  v1::Image image;
  image.set_arch(b.id.arch);
  image.set_kind(kcache::wire::to_proto(b.id.kind));
  image.set_size(b.size);
  image.set_sha256(b.sha256);
  image.set_needs_jit(needs_jit);
  return image;
}

// --kind's value; nullopt when not given.
std::optional<kcache::ImageKind> kind_flag(const std::string& kind) {
  if (kind.empty()) return std::nullopt;
  auto k = kcache::parse_kind(kind);
  if (!k) fail(k_exit_usage, "--kind: " + kcache::unknown_kind_error(kind).message);
  return k;
}

// Remembers what the fast path (front.cpp) needs to answer the next compile of this job
// without gRPC: the fingerprint, host triple and HTTP port (one GetCapabilities, after the work).
void remember_server(kcache::Client& client) {
  auto caps = client.capabilities();
  if (!caps) return;
  kcache::save_server_state(client.server(), {caps->fingerprint(), caps->host_triple(), caps->http_port()});
}

int run_compile(kcache::Client& client, const GlobalFlags& g, const JobFlags& job, const OutputFlags& out) {
  v1::CompileRequest request = build_request(job.read(module_limit(client)));
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
  print_compiled(g, *response, paths);
  return k_exit_ok;
}

int run_fetch(kcache::Client& client, const GlobalFlags& g, const std::string& key, const std::string& arch,
              const std::string& side, const std::string& kind, const OutputFlags& out) {
  v1::FetchRequest request;
  request.set_key(key);
  request.set_arch(arch);
  request.set_side(kcache::wire::to_proto(*kcache::parse_side(side)));
  if (auto k = kind_flag(kind)) request.set_kind(kcache::wire::to_proto(*k));
  auto fetched = client.fetch(request);
  if (!fetched) fail(fetched.error());
  auto paths = write_images(out, {&fetched->image}, {&fetched->data});
  print_served(g, std::string(kcache::outcome_name(kcache::Outcome::hit)), key, fetched->image, paths[0]);
  return k_exit_ok;
}

int run_lookup(kcache::Client& client, const GlobalFlags& g, const std::vector<std::string>& keys,
               const std::string& side) {
  v1::LookupRequest request;
  request.set_side(kcache::wire::to_proto(*kcache::parse_side(side)));
  for (const std::string& k : keys) request.add_keys(k);
  auto response = client.lookup(request);
  if (!response) fail(response.error());
  print_lookup(g, *response);
  bool all_found = std::all_of(response->results().begin(), response->results().end(),
                               [](const v1::LookupResponse::Result& r) { return r.found(); });
  return all_found ? k_exit_ok : k_exit_not_found;
}

int run_stats(kcache::Client& client, const GlobalFlags& g) {
  auto s = client.stats();
  if (!s) fail(s.error());
  print_stats(g, *s);
  return k_exit_ok;
}

int run_key(kcache::Client& client, const GlobalFlags& g, const JobFlags& job) {
  v1::CompileRequest request = build_request(job.read(module_limit(client)));
  auto key = client.compute_key(request);
  if (!key) fail(key.error());
  remember_server(client);
  auto caps = client.capabilities();
  print_key(g, key->hex(), caps ? caps->fingerprint() : "");
  return k_exit_ok;
}

// The job of one checked manifest module, its paths relative to the manifest's folder.
JobFiles job_from_manifest(const kcache::ManifestModule& m, const std::filesystem::path& base,
                           const std::vector<std::string>& archs, kcache::CudaVersion driver) {
  JobFiles job;
  job.files = {(base / m.path).string()};
  for (const std::string& linked : m.link) job.files.push_back((base / linked).string());
  job.format = m.format;
  for (const std::string& dir : m.include_dirs) job.include_dirs.push_back((base / dir).string());
  job.spec = m.spec;
  if (m.spec.side == kcache::Side::device) job.archs = archs;
  job.kinds = m.emit;
  job.driver = driver;
  return job;
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
  BundleWriter writer(out);
  auto caps = client.capabilities();
  if (!caps) fail(caps.error());
  const std::uint64_t max_module_bytes = module_limit(*caps);

  std::vector<kcache::BundleEntry> entries(modules.size());
  std::vector<std::string> errors(modules.size());
  std::atomic<std::size_t> next{0};
  Progress progress(modules.size());
  auto work = [&] {
    for (std::size_t i = next++; i < modules.size(); i = next++) {
      const kcache::ManifestModule& m = modules[i];
      try {
        JobInput input = read_job(job_from_manifest(m, base, archs, driver_version), max_module_bytes);
        auto response = client.compile(build_request(input));
        if (!response) fail(response.error());
        entries[i] = writer.write_images(m.path, m.spec.side, *response);
      } catch (const Failure& f) {
        errors[i] = f.message;
      } catch (const std::exception& e) {  // nothing may leave a thread: that would abort
        errors[i] = std::string("internal error: ") + e.what();
      }
      progress.done(m.path, !errors[i].empty());
    }
  };
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < std::max(1u, jobs); ++t) threads.emplace_back(work);
  for (std::thread& t : threads) t.join();
  progress.finish();

  std::size_t failed = 0, images = 0;
  for (std::size_t i = 0; i < modules.size(); ++i) {
    if (!errors[i].empty()) {
      ++failed;
      std::fprintf(stderr, "kcache: %s: %s\n", modules[i].path.c_str(), errors[i].c_str());
    }
    images += entries[i].images.size();
  }
  if (failed > 0) fail(k_exit_bad_input, std::to_string(failed) + " of " + std::to_string(modules.size()) + " modules failed; no bundle index written");
  writer.write_index({caps->fingerprint(), std::move(entries), caps->cuda_version(), driver_version});
  print_bundle(g, out, modules.size(), images);
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
  auto found = bundle->fetch(key, arch, kind_flag(kind), driver_version);
  if (!found) fail_bundle(found.error());
  v1::Image image = image_of(found->image, found->needs_jit);
  auto paths = write_images(out, {&image}, {&found->data});
  print_served(g, std::string(kcache::outcome_name(kcache::Outcome::hit)) + " (bundle)", key, image, paths[0]);
  return k_exit_ok;
}

int run_capabilities(kcache::Client& client, const GlobalFlags& g) {
  auto caps = client.capabilities();
  if (!caps) fail(caps.error());
  print_capabilities(g, *caps);
  return k_exit_ok;
}

int run_health(kcache::Client& client, const GlobalFlags& g) {
  auto ok = client.health();
  if (!ok) fail(ok.error());
  print_serving(g);
  return k_exit_ok;
}

int run_verify(kcache::Client& client, const GlobalFlags& g, bool repair) {
  auto r = client.verify(repair);
  if (!r) fail(r.error());
  print_verified(g, *r);
  return r->problems().empty() && !r->counters_wrong() ? k_exit_ok : k_exit_error;
}

int run_evict(kcache::Client& client, const GlobalFlags& g, const std::vector<std::string>& keys,
              const std::string& side, const std::string& to) {
  v1::EvictRequest request;
  request.set_side(kcache::wire::to_proto(*kcache::parse_side(side)));
  for (const std::string& k : keys) request.add_keys(k);
  if (!to.empty()) {
    auto bytes = kcache::parse_size(to);
    if (!bytes) fail(k_exit_usage, "--to '" + to + "' is not a size: use bytes, or a number with K, M, G or T");
    request.set_target_bytes(*bytes);
  }
  if (keys.empty() && to.empty()) fail(k_exit_usage, "evict: name KEYs, or --to SIZE");
  auto r = client.evict(request);
  if (!r) fail(r.error());
  print_evicted(g, *r);
  return k_exit_ok;
}

int run_purge(kcache::Client& client, const GlobalFlags& g) {
  auto r = client.purge();
  if (!r) fail(r.error());
  print_purged(g, *r);
  return k_exit_ok;
}

// The client the global flags describe.
kcache::ClientOptions client_options(const GlobalFlags& g, std::string token) {
  kcache::ClientOptions options;
  options.tls = g.wants_tls();
  options.tls_ca_file = g.tls_ca_file;
  options.tls_cert_file = g.tls_cert_file;
  options.tls_key_file = g.tls_key_file;
  options.token = std::move(token);
  options.server = kcache::resolve_server(g.server);
  options.deadline = std::chrono::milliseconds(static_cast<long long>(g.timeout_s * 1000));
  // A third of a second of retries (50, 100, 200 ms) rides out a daemon being restarted or a
  // connection refused once under load; one that is down is still reported at once.
  options.max_attempts = 4;
  return options;
}

}  // namespace

// The subcommand of `app` nearest to `word` by edit distance, when one is near enough to be what
// was meant (at most a third of its letters off); empty otherwise.
static std::string closest_command(const CLI::App& app, const std::string& word) {
  auto distance = [](const std::string& a, const std::string& b) {
    std::vector<std::size_t> row(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
      std::size_t diagonal = row[0];
      row[0] = i;
      for (std::size_t j = 1; j <= b.size(); ++j) {
        std::size_t above = row[j];
        row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
        diagonal = above;
      }
    }
    return row[b.size()];
  };
  std::string best;
  std::size_t best_distance = word.size() / 3 + 1;
  for (const CLI::App* command : app.get_subcommands([](const CLI::App*) { return true; })) {
    std::size_t d = distance(word, command->get_name());
    if (d < best_distance) best = command->get_name(), best_distance = d;
  }
  return best;
}

int main(int argc, char** argv) {
  // `kcache nvcc ...`: the compiler launcher (launcher/launcher.hpp).
  if (std::optional<int> launched = kcache::launcher::launch_if_compiler(argc, argv)) return *launched;
  CLI::App app{"kcache: client of the kcached GPU compile cache", "kcache"};
  app.set_version_flag("--version", kcache::version_text("kcache"), "Print the version, the commit and the LLVM and CUDA it was built with");
  app.footer(k_exit_help);
  app.require_subcommand(1);
  GlobalFlags g;
  g.add_to(app);

  // The command table: each subcommand, its flags, and what runs it.
  using Run = std::function<int(kcache::Client&)>;
  std::vector<std::pair<CLI::App*, Run>> commands;
  auto command = [&](const char* name, const char* about, Run run) {
    CLI::App* cmd = app.add_subcommand(name, about);
    commands.emplace_back(cmd, std::move(run));
    return cmd;
  };

  JobFlags compile_job;
  OutputFlags compile_out;
  auto* compile = command("compile", "Compile a module (or get it from the cache)",
                          [&](kcache::Client& c) { return run_compile(c, g, compile_job, compile_out); });
  compile_job.add_to(*compile);
  compile_out.add_to(*compile);

  std::string fetch_key, fetch_arch, fetch_side = "device", fetch_kind;
  OutputFlags fetch_out;
  auto* fetch = command("fetch", "Fetch the best stored image of KEY for a device arch", [&](kcache::Client& c) {
    return run_fetch(c, g, fetch_key, fetch_arch, fetch_side, fetch_kind, fetch_out);
  });
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
  auto* lookup = command("lookup", "Say which keys are stored, and their images (exit 4 if any is not)",
                         [&](kcache::Client& c) { return run_lookup(c, g, lookup_keys, lookup_side); });
  lookup->add_option("KEY", lookup_keys, "Keys (64 hex digits)")->required();
  lookup->add_option("--side", lookup_side, "device or host")->check(CLI::IsMember({"device", "host"}));

  command("stats", "Show the daemon's counters", [&](kcache::Client& c) { return run_stats(c, g); });
  JobFlags key_job;
  auto* key = command("key", "Print the key of a job (asks the daemon only for its fingerprint)",
                      [&](kcache::Client& c) { return run_key(c, g, key_job); });
  key_job.add_to(*key);
  command("capabilities", "Show the daemon's toolchain and limits",
          [&](kcache::Client& c) { return run_capabilities(c, g); });
  command("health", "gRPC health check (no token needed): exit 0 serving, 5 not",
          [&](kcache::Client& c) { return run_health(c, g); });

  std::string manifest, bundle_out, precompile_driver;
  std::vector<std::string> precompile_archs;
  unsigned precompile_jobs = 4;
  auto* precompile = command(
      "precompile", "Compile every module of a manifest (JSON or TOML) into a bundle", [&](kcache::Client& c) {
        return run_precompile(c, g, manifest, precompile_archs, bundle_out, precompile_jobs, precompile_driver);
      });
  precompile->add_option("MANIFEST", manifest,
                         "JSON: {\"archs\": [...], \"modules\": [{\"path\": ..., options}]}, or the same in a .toml file")
      ->required();
  precompile->add_option("--arch", precompile_archs, "GPU archs, comma-separated (default: the manifest's)")
      ->delimiter(',');
  precompile->add_option("--out", bundle_out, "Bundle folder")->required();
  precompile->add_option("-j,--jobs", precompile_jobs, "Modules compiled at once")->capture_default_str();
  precompile->add_option("--driver", precompile_driver,
                         "CUDA version of the drivers that will load the bundle (12.4): PTX they JIT, no cubins they "
                         "cannot load");

  std::string bundle_dir, bundle_key, bundle_arch, bundle_kind, bundle_driver;
  OutputFlags bundle_fetch_out;
  auto* bundle_fetch = command("bundle-fetch", "Serve an image from a bundle, with no daemon", [&](kcache::Client&) {
    return run_bundle_fetch(g, bundle_dir, bundle_key, bundle_arch, bundle_kind, bundle_driver, bundle_fetch_out);
  });
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
  auto* verify = command("verify", "Check every stored entry (admin); exit 1 if any is bad",
                         [&](kcache::Client& c) { return run_verify(c, g, repair); });
  verify->add_flag("--repair", repair, "Remove bad entries and fix the usage counters");
  std::vector<std::string> evict_keys;
  std::string evict_side = "device", evict_to;
  auto* evict = command("evict", "Remove entries (admin): the KEYs named, and/or LRU down to --to",
                        [&](kcache::Client& c) { return run_evict(c, g, evict_keys, evict_side, evict_to); });
  evict->add_option("KEY", evict_keys, "Keys (64 hex digits)");
  evict->add_option("--side", evict_side, "device or host")->check(CLI::IsMember({"device", "host"}));
  evict->add_option("--to", evict_to, "Evict least recently used entries down to this many bytes (K/M/G)");
  bool purge_yes = false;
  auto* purge = command("purge", "Remove every entry (admin)", [&](kcache::Client& c) { return run_purge(c, g); });
  purge->add_flag("--yes", purge_yes, "Yes, remove everything")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // A word where the command goes that names none: said so, with the closest command.
    for (const std::string& word : app.remaining()) {
      if (word.starts_with("-")) continue;
      std::string closest = closest_command(app, word);
      std::fprintf(stderr, "kcache: unknown command '%s'%s (kcache --help lists them)\n", word.c_str(),
                   closest.empty() ? "" : ("; did you mean '" + closest + "'?").c_str());
      return k_exit_usage;
    }
    int code = app.exit(e);
    return code == 0 ? k_exit_ok : k_exit_usage;
  }
  if (auto why = kcache::server_address_problem(kcache::resolve_server(g.server))) {
    std::fprintf(stderr, "kcache: %s\n", why->c_str());
    return k_exit_usage;
  }

  auto token = kcache::resolve_token(g.token_file);
  if (!token) {
    std::fprintf(stderr, "kcache: %s\n", token.error().message.c_str());
    return k_exit_usage;
  }
  kcache::Client client(client_options(g, std::move(*token)));
  try {
    for (const auto& [cmd, run] : commands) {
      if (*cmd) return run(client);
    }
  } catch (const Failure& f) {
    return report_failure(g, f);
  } catch (const std::exception& e) {
    // Every expected failure is a Failure; anything else is a bug, still reported, never an abort.
    return report_failure(g, Failure{k_exit_error, std::string("internal error: ") + e.what(), {}});
  }
  return k_exit_usage;
}
