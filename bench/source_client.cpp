// kcache in process, as a JIT user would call it through libkcache: the kcache side of
// bench/nvrtc_source.py, the counterpart of kcache_bench_nvrtc (bench/nvrtc_inproc.cpp). One
// process, one kcache::Client, one CUDA C++ source held in memory with its headers, and per run
// the wall time of:
//   miss   a CompileRequest built from the source with a `// kcache-bench NONCE N` line appended
//          (a new key every run), Client::compile: the daemon's NVRTC compile, stored, returned;
//   hit    the same for the unchanged source, after one untimed compile has filled the cache;
//   fetch  Client::fetch_or_compile of the unchanged source: the key computed here, one GET of
//          the image (the load-time path; kcache/client.hpp).
// Building the request is inside the timing (the spec, the headers' SHA-256, the proto), as a
// JIT user holding the source builds it on each call; finding and reading the headers is not,
// as kcache_bench_nvrtc reads no file inside its timing either. Prints CSV `measure,run,ms` on
// stdout, the first run of each measure being its warm-up, and the hit's cubin with --out.
//
//   kcache_bench_source --server 127.0.0.1:7878 kernel.cu -I inc --arch sm_90 --repeat 6
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kcache/client.hpp"
#include "kcache/source_headers.hpp"
#include "wire/wire.hpp"

namespace {

namespace v1 = kcache::v1;

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "source_client: %s\n", message.c_str());
  std::exit(1);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) die("cannot read " + path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Source {
  std::string text;
  std::vector<kcache::CollectedHeader> headers;
  std::vector<std::string> name_exprs;
  std::string arch;
};

// What the CLI's build_request does for a .cu file, from memory.
v1::CompileRequest request_for(const Source& source, const std::string& text) {
  kcache::JobSpec spec;
  spec.side = kcache::Side::device;
  spec.format = kcache::InputFormat::cuda_cpp;
  spec.source.name_expressions = source.name_exprs;
  std::vector<kcache::wire::NamedBytes> headers;
  for (const kcache::CollectedHeader& h : source.headers) {
    spec.source.headers.push_back({h.name, kcache::sha256(h.bytes)});
    headers.push_back({h.name, h.bytes});
  }
  v1::CompileRequest request;
  kcache::wire::fill_request(spec, request);
  kcache::wire::set_modules(spec, {text}, request);
  kcache::wire::set_headers(headers, request);
  request.add_archs(source.arch);
  request.add_emit(kcache::wire::to_proto(kcache::ImageKind::cubin));
  return request;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

// The one cubin of a compile reply; dies on an error or on the wrong outcome.
std::string cubin_of(const kcache::Expected<v1::CompileResponse>& reply, bool want_hit, const char* measure) {
  if (!reply) die(std::string(measure) + ": " + reply.error().message);
  const bool hit = reply->outcome() == v1::OUTCOME_HIT;
  if (hit != want_hit) {
    die(std::string(measure) + ": kcached answered a " + (hit ? "hit" : "miss") + " where a " +
        (want_hit ? "hit" : "miss") + " was measured");
  }
  if (reply->images_size() != 1 || reply->images(0).data().empty()) die(std::string(measure) + ": no cubin came back");
  return reply->images(0).data();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kcache in process: CUDA C++ compiles through libkcache (bench/nvrtc_source.py)"};
  std::string server, source_path, out_path;
  std::vector<std::string> include_dirs;
  Source source;
  source.arch = "sm_90";
  int repeat = 6;
  app.add_option("--server", server, "kcached's HOST:PORT")->required();
  app.add_option("source", source_path, "the .cu file")->required();
  app.add_option("-I", include_dirs, "where the source's headers are found");
  app.add_option("--name-expr", source.name_exprs, "a name expression (repeatable)");
  app.add_option("--arch", source.arch, "the cubin's arch");
  app.add_option("--repeat", repeat, "runs of each measure, the first a warm-up")->check(CLI::PositiveNumber);
  app.add_option("--out", out_path, "where to write the hit's cubin");
  CLI11_PARSE(app, argc, argv);

  source.text = read_file(source_path);
  std::vector<std::filesystem::path> dirs(include_dirs.begin(), include_dirs.end());
  std::filesystem::path source_dir = std::filesystem::path(source_path).parent_path();
  auto headers = kcache::collect_headers(source.text, source_dir.empty() ? "." : source_dir, dirs);
  if (!headers) die(headers.error().message);
  source.headers = std::move(*headers);

  kcache::Client client(kcache::ClientOptions{server});
  if (auto caps = client.capabilities(); !caps) die(caps.error().message);  // the connection, outside the timing
  std::printf("measure,run,ms\n");

  // A nonce per process, so that a second run against the same daemon misses too.
  std::string nonce = std::to_string(std::random_device{}()) + "." + std::to_string(
      std::chrono::steady_clock::now().time_since_epoch().count());
  for (int run = 1; run <= repeat; ++run) {
    auto start = std::chrono::steady_clock::now();
    v1::CompileRequest request = request_for(source, source.text + "// kcache-bench " + nonce + " " + std::to_string(run) + "\n");
    cubin_of(client.compile(request), false, "miss");
    std::printf("miss,%d,%.3f\n", run, ms_since(start));
  }

  // Untimed: fills the cache (a hit already where this daemon compiled the source before).
  if (auto filled = client.compile(request_for(source, source.text)); !filled) die("fill: " + filled.error().message);
  std::string cubin;
  for (int run = 1; run <= repeat; ++run) {
    auto start = std::chrono::steady_clock::now();
    cubin = cubin_of(client.compile(request_for(source, source.text)), true, "hit");
    std::printf("hit,%d,%.3f\n", run, ms_since(start));
  }
  for (int run = 1; run <= repeat; ++run) {
    auto start = std::chrono::steady_clock::now();
    auto fetched = client.fetch_or_compile(request_for(source, source.text), source.arch);
    if (!fetched) die("fetch: " + fetched.error().message);
    if (fetched->data != cubin) die("fetch: the fetched image is not the hit's cubin");
    if (fetched->image.lowered_names_size() != static_cast<int>(source.name_exprs.size())) {
      die("fetch: the image names " + std::to_string(fetched->image.lowered_names_size()) + " of " +
          std::to_string(source.name_exprs.size()) + " name expressions");
    }
    std::printf("fetch,%d,%.3f\n", run, ms_since(start));
  }
  std::fflush(stdout);
  if (!out_path.empty()) {
    std::ofstream f(out_path, std::ios::binary | std::ios::trunc);
    f.write(cubin.data(), static_cast<std::streamsize>(cubin.size()));
    if (!f) die("cannot write " + out_path);
  }
  return 0;
}
