// kcache: the command a build runs for every kernel. A cached `kcache compile` is answered here,
// without loading gRPC (a program linked to Debian's shared gRPC spends about 24 ms just
// starting): the key is computed locally with the code the daemon uses (kcache_common) and the
// fingerprint the full client last saw (kcache/endpoint.hpp), then each image is one HTTP GET
// from kcached's --http-listen, checked against its SHA-256. Anything else (a miss, another
// subcommand, --json, TLS, --help, a daemon with no HTTP API or not yet seen) is handed, with the same
// arguments, to kcache-grpc beside this executable, which also remembers the daemon for next
// time. KCACHE_FAST_PATH=0 always hands over.
#include <unistd.h>

#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <optional>

#include "cli_common.hpp"
#include "endpoint.hpp"
#include "http_get.hpp"
#include "image_output.hpp"
#include "kcache/http_api.hpp"
#include "kcache/key.hpp"
#include "launcher/direct_key.hpp"

namespace {

using namespace kcache;
using namespace kcache::cli;

// How long the fast path waits to connect, and then for each read or write, before it hands over.
constexpr std::chrono::milliseconds k_fast_path_timeout{1000};

// The exit code of a compile answered from the cache, or nullopt to hand over.
std::optional<int> cached_compile(int argc, char** argv) {
  if (const char* off = std::getenv("KCACHE_FAST_PATH"); off != nullptr && std::string_view(off) == "0") {
    return std::nullopt;
  }
  CLI::App app{"kcache", "kcache"};
  app.require_subcommand(1);
  GlobalFlags g;
  g.add_to(app);
  JobFlags job;
  OutputFlags out;
  auto* compile = app.add_subcommand("compile");
  job.add_to(*compile);
  out.add_to(*compile);
  try {
    app.parse(argc, argv);  // another subcommand, --help, or a mistake: kcache-grpc says what
  } catch (const CLI::Error&) {
    return std::nullopt;
  }
  if (g.json || g.wants_tls()) return std::nullopt;  // JSON output and TLS: kcache-grpc
  std::string server = resolve_server(g.server);
  std::optional<ServerState> state = load_server_state(server);
  if (!state || state->http_port == 0) return std::nullopt;
  auto token = resolve_token(g.token_file);
  auto fingerprint = digest_from_hex(state->fingerprint);
  if (!token || !fingerprint) return std::nullopt;

  JobInput input;
  JobSpec& spec = input.spec;
  std::vector<ImageRequest> images;
  try {
    // The saved state does not hold the daemon's --max-module-size: its default bounds the read,
    // and a larger module (for a daemon that takes one) is read again by kcache-grpc, which asks.
    input = job.read(k_default_max_module_bytes);
    // The key of a job for an older driver needs the daemon's PTX ISA, which the saved state
    // lacks: such jobs take the full client.
    if (input.driver != 0) return std::nullopt;
    // Lowered names come with an image's metadata, which the HTTP image API does not send.
    if (!spec.source.name_expressions.empty()) return std::nullopt;
    if (!canonicalize(spec, state->host_triple)) return std::nullopt;
    auto planned = plan_images(spec, input.archs, input.kinds);
    if (!planned) return std::nullopt;
    images = std::move(*planned);
  } catch (const Failure&) {
    return std::nullopt;
  }
  Key key = compute_key(spec, input.views(), *fingerprint);

  // Its own short limit, not --timeout: a daemon whose HTTP side is slow or wedged costs a second,
  // then the gRPC path answers within --timeout.
  auto limit = std::min(k_fast_path_timeout, std::chrono::milliseconds(static_cast<long long>(g.timeout_s * 1000)));
  auto http = HttpConnection::open(server_host(server), static_cast<int>(state->http_port), limit);
  if (!http) return std::nullopt;
  std::vector<std::pair<std::string, std::string>> headers;
  if (!token->empty()) headers.emplace_back("Authorization", "Bearer " + *token);

  std::vector<ImageLine> lines;
  std::vector<std::string> bodies;
  std::string stubbed;
  for (const ImageRequest& want : images) {
    // So the daemon counts this compile as one hit, as it would over gRPC (kcache/http_api.hpp).
    headers.emplace_back(http_api::k_compile_header,
                         &want == &images.back() ? http_api::k_compile_last : http_api::k_compile_part);
    auto res = http->get(http_api::image_path(spec.side, key.hex(), want.arch, want.kind), headers);
    headers.pop_back();
    // Only a whole, verified answer for the fingerprint the key was computed with is used; a
    // miss, an error or a changed toolchain goes the full way (which refreshes the state).
    if (!res || res->status != 200 || res->header(http_api::k_fingerprint_header) != state->fingerprint) {
      return std::nullopt;
    }
    std::string digest = to_hex(sha256(res->body));
    if (res->header(http_api::k_sha256_header) != digest) return std::nullopt;
    lines.push_back(ImageLine{want.arch, want.kind, res->body.size(), digest, false});
    if (stubbed.empty()) stubbed = res->header(http_api::k_stubbed_header);
    bodies.push_back(std::move(res->body));
  }

  try {
    auto paths = write_images(out, lines, std::vector<std::string_view>(bodies.begin(), bodies.end()));
    print_images(std::string(outcome_name(Outcome::hit)) + "  " + key.hex(), lines, paths);
  } catch (const Failure& f) {
    std::fprintf(stderr, "kcache: %s\n", f.message.c_str());
    return f.code;
  }
  std::vector<std::string> symbols;
  for (std::size_t at = 0; !stubbed.empty() && at != std::string::npos;) {
    std::size_t comma = stubbed.find(',', at);
    symbols.push_back(stubbed.substr(at, comma - at));
    at = comma == std::string::npos ? comma : comma + 1;
  }
  print_stubbed(symbols);
  return k_exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // An nvcc compile this machine's direct-mode manifest holds, whose object it keeps: answered
    // here, before gRPC would load (the launcher's full path is kcache-grpc's).
    if (std::optional<int> code = kcache::launcher::answer_nvcc_from_this_machine(argc, argv)) return *code;
    if (std::optional<int> code = cached_compile(argc, argv)) return *code;
  } catch (const std::exception&) {
    // Not an expected failure (those are Failures, answered above): kcache-grpc does it again
    // and says what is wrong.
  }
  std::error_code ec;
  std::filesystem::path full = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / "kcache-grpc";
  ::execv(full.c_str(), argv);
  std::fprintf(stderr, "kcache: cannot run %s (%s); it is installed beside kcache\n", full.c_str(),
               std::strerror(errno));
  return k_exit_error;
}
