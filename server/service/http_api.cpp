#include "service/http_api.hpp"

#include "kcache/checksum.hpp"
#include "kcache/driver.hpp"

#include <httplib.h>

#include "http_request.hpp"
#include "image_proto.hpp"
#include "service/service.hpp"
#include "wire/wire.hpp"

namespace kcache::server {
namespace {

int http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::k_invalid_argument: return 400;
    case ErrorCode::k_unauthenticated: return 401;
    case ErrorCode::k_permission_denied: return 403;
    case ErrorCode::k_not_found: return 404;
    case ErrorCode::k_resource_exhausted: return 429;
    case ErrorCode::k_unavailable: return 503;
    default: return 500;
  }
}

Error unknown_kind(const std::string& text) {
  return make_error(ErrorCode::k_invalid_argument, "unknown image kind '" + text + "' (use ptx, cubin or obj)");
}

// How far a handler's read may go: only memory on an event thread (http_request.hpp).
KCacheService::Reach reach_here() { return may_wait() ? KCacheService::Reach::anywhere : KCacheService::Reach::memory; }

// An image as the answer: its bytes from where they lie, with kcached's XXH3 of them (computed
// over bytes verified against the metadata's SHA-256) for the client's check.
void send_image(const httplib::Request& req, httplib::Response& res, std::shared_ptr<const Image> image) {
  std::string_view bytes = image->data;
  res.set_header("X-Kcache-Xxh3", transfer_checksum_hex(bytes));
  set_shared_content(req, res, std::move(image), bytes, "application/octet-stream");
}

void send_error(httplib::Response& res, const Error& e) {
  res.status = http_status(e.code);
  res.set_header("X-Kcache-Error", error_code_name(e.code));
  res.set_content(e.message + "\n", "text/plain; charset=utf-8");
}

}  // namespace

void add_http_api_routes(httplib::Server& server, KCacheService& service, Metrics& metrics) {
  // Connections, deadlines and limits are the listener's (server/http.hpp); these are the routes.
  // Each first runs on an event thread, reading only what is in memory, and defers to a pool
  // thread when the answer needs a wait (http_request.hpp).
  // Counts the call like the gRPC interceptor does, then answers with `result`'s error if any.
  auto finish = [&metrics](const char* method, httplib::Response& res, const Expected<void>& result) {
    metrics.count_request("kcache.http", method, result ? 0 : wire::to_status(result.error()).error_code());
    if (!result) send_error(res, result.error());
    return result.ok();
  };
  std::string fingerprint = service.fingerprint_hex();

  // Nothing, the fingerprint included, goes to a caller that is not allowed to read: each route
  // authorizes before it sets a header.
  server.Get("/v1/fingerprint", [&service, fingerprint, finish](const httplib::Request& req, httplib::Response& res) {
    if (!finish("GetFingerprint", res, service.authorize_read(req.get_header_value("Authorization"), req.remote_addr,
                                                              "GET /v1/fingerprint"))) {
      return;
    }
    res.set_header("X-Kcache-Fingerprint", fingerprint);
    res.set_content(fingerprint + "\n", "text/plain");
  });

  // Fetch over HTTP, for Client::fetch: the best image for a device by CUDA's rules, its metadata
  // (a serialized kcache.v1.Image, with needs_jit) in X-Kcache-Image as hex.
  server.Get(R"(/v1/select/(device|host)/([^/]+)/([^/]+))",
             [&service, fingerprint, finish](const httplib::Request& req, httplib::Response& res) {
    auto allowed = service.authorize_read(req.get_header_value("Authorization"), req.remote_addr, "GET select");
    if (!allowed) return (void)finish("SelectImage", res, allowed);
    res.set_header("X-Kcache-Fingerprint", fingerprint);
    v1::FetchRequest request;
    request.set_side(req.matches[1] == "host" ? v1::SIDE_HOST : v1::SIDE_DEVICE);
    request.set_key(req.matches[2].str());
    request.set_arch(req.matches[3].str());
    if (req.has_param("kind")) {
      auto kind = parse_kind(req.get_param_value("kind"));
      if (!kind) return (void)finish("SelectImage", res, unknown_kind(req.get_param_value("kind")));
      request.set_kind(wire::to_proto(*kind));
    }
    if (req.has_param("driver")) {  // 12.4 or 12040, as FetchRequest.driver_version
      auto driver = parse_cuda_version(req.get_param_value("driver"));
      if (!driver) return (void)finish("SelectImage", res, driver.error());
      request.set_driver_version(*driver);
    }
    auto found = service.select_image(request, reach_here());
    if (!found && is_would_block(found.error())) return defer();
    if (!found) return (void)finish("SelectImage", res, found.error());
    finish("SelectImage", res, {});
    v1::Image meta;
    to_proto(found->image->meta, meta);
    meta.set_needs_jit(found->needs_jit);
    res.set_header("X-Kcache-Image", to_hex(meta.SerializeAsString()));
    send_image(req, res, std::move(found->image));
  });

  server.Get(R"(/v1/(device|host)/([^/]+)/([^/]+)/([^/]+))",
             [&service, fingerprint, finish](const httplib::Request& req, httplib::Response& res) {
    auto allowed = service.authorize_read(req.get_header_value("Authorization"), req.remote_addr, "GET image");
    if (!allowed) return (void)finish("GetImage", res, allowed);
    res.set_header("X-Kcache-Fingerprint", fingerprint);
    Side side = req.matches[1] == "host" ? Side::host : Side::device;
    auto kind = parse_kind(req.matches[4].str());
    if (!kind) return (void)finish("GetImage", res, unknown_kind(req.matches[4].str()));
    // The CLI marks the images of a cached compile, so that compile counts as a hit, as over gRPC.
    std::string compile = req.get_header_value("X-Kcache-Compile");
    auto purpose = compile == "last"   ? KCacheService::ReadFor::compile_last
                   : compile == "part" ? KCacheService::ReadFor::compile_part
                                       : KCacheService::ReadFor::fetch;
    auto image = service.read_image(side, req.matches[2].str(), ImageRequest{req.matches[3].str(), *kind}, purpose,
                                    reach_here());
    if (!image && is_would_block(image.error())) return defer();
    if (!image) return (void)finish("GetImage", res, image.error());
    finish("GetImage", res, {});
    res.set_header("X-Kcache-Sha256", to_hex((*image)->meta.sha256));
    if (!(*image)->meta.stubbed.empty()) {
      std::string stubbed;
      for (const std::string& s : (*image)->meta.stubbed) stubbed += (stubbed.empty() ? "" : ",") + s;
      res.set_header("X-Kcache-Stubbed", stubbed);
    }
    send_image(req, res, std::move(*image));
  });
}

}  // namespace kcache::server
