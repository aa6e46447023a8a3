#include "api/http_api.hpp"

#include "kcache/checksum.hpp"
#include "kcache/driver.hpp"
#include "kcache/http_api.hpp"

#include <httplib.h>

#include <algorithm>
#include <optional>
#include <string_view>

#include "net/http_request.hpp"
#include "image_proto.hpp"
#include "kcache/v1/kcache.pb.h"
#include "api/auth.hpp"
#include "api/calls.hpp"
#include "cache/cache.hpp"
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

// A route's side, named in its path: device or host; any other is INVALID_ARGUMENT, as over gRPC.
Expected<Side> side_in_path(std::string_view text) {
  if (auto side = parse_side(text)) return *side;
  return unknown_side_error(text);
}

// cpp-httplib takes header names as strings.
std::string header(std::string_view name) { return std::string(name); }

// How far a handler's read may go: only memory on an event thread (http_request.hpp).
Cache::Reach reach_here() { return may_wait() ? Cache::Reach::anywhere : Cache::Reach::memory; }

// An image as the answer: its bytes from where they lie, with kcached's XXH3 of them (computed
// over bytes verified against the metadata's SHA-256) for the client's check.
// `req` is cpp-httplib's request (a HEAD gets the head alone), or null for a fast route's.
void send_image(const httplib::Request* req, httplib::Response& res, std::shared_ptr<const Image> image) {
  std::string_view bytes = image->data;
  std::uint64_t checksum = image->transfer_checksum.get([bytes] { return transfer_checksum(bytes); });
  res.set_header(header(http_api::k_xxh3_header), transfer_checksum_hex(checksum));
  if (req != nullptr) {
    set_shared_content(*req, res, std::move(image), bytes, "application/octet-stream");
  } else {
    set_shared_content(res, std::move(image), bytes, "application/octet-stream");
  }
}

// What a select request asks, from either parser (cpp-httplib's or the fast route's).
struct SelectPath {
  std::string_view side, key, arch;
  std::optional<std::string_view> kind, driver;
  std::string_view authorization;
  const std::string& peer;
};

void send_error(httplib::Response& res, const Error& e) {
  res.status = http_status(e.code);
  res.set_header(header(http_api::k_error_header), error_code_name(e.code));
  res.set_content(e.message + "\n", "text/plain; charset=utf-8");
}

}  // namespace

std::string http_authorization(const httplib::Request& req) {
  if (req.has_header("Authorization")) return req.get_header_value("Authorization");
  // Cookie: a=b; kcache_token=TOKEN (RFC 6265: pairs split by "; "); the first of that name counts.
  const std::string cookies = req.get_header_value("Cookie");
  std::string_view rest = cookies;
  while (!rest.empty()) {
    std::size_t end = rest.find(';');
    std::string_view pair = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    std::size_t equals = pair.find('=');
    if (equals == std::string_view::npos || pair.substr(0, equals) != http_api::k_token_cookie) continue;
    std::string_view token = pair.substr(equals + 1);
    if (token.empty()) return {};
    return "Bearer " + std::string(token);
  }
  return {};
}

void add_http_api_routes(Router& server, Cache& cache, const Authenticator& auth, CallTracker& calls, Metrics& metrics) {
  // Connections, deadlines and limits are the listener's (net/http.hpp); these are the routes.
  // Each first runs on an event thread, reading only what is in memory, and defers to a pool
  // thread when the answer needs a wait (http_request.hpp).
  // Counts the call like the gRPC interceptor does, then answers with `result`'s error if any.
  auto finish = [&metrics](const char* method, httplib::Response& res, const Expected<void>& result) {
    metrics.count_request("kcache.http", method, result ? 0 : wire::to_status(result.error()).error_code());
    if (!result) send_error(res, result.error());
    return result.ok();
  };
  std::string fingerprint = to_hex(cache.toolchain().fingerprint);
  // Whether a call carrying `authorization` ("Bearer TOKEN" or empty) from `peer` may read, as for
  // a gRPC call.
  auto authorize_read = [&auth](std::string_view authorization, const std::string& peer, const char* method) {
    return auth.check(authorization, peer, Role::read, method);
  };

  // Nothing, the fingerprint included, goes to a caller that is not allowed to read: each route
  // authorizes before it sets a header.
  server.Get(header(http_api::k_fingerprint_path), [authorize_read, fingerprint, finish](const httplib::Request& req, httplib::Response& res) {
    if (!finish("GetFingerprint", res, authorize_read(http_authorization(req), req.remote_addr,
                                                              "GET /v1/fingerprint"))) {
      return;
    }
    res.set_header(header(http_api::k_fingerprint_header), fingerprint);
    res.set_content(fingerprint + "\n", "text/plain");
  });

  // Fetch over HTTP, for Client::fetch: the best image for a device by CUDA's rules, its metadata
  // (a serialized kcache.v1.Image, with needs_jit) in X-Kcache-Image as hex. The hot route: its
  // plain requests (all that Client::fetch sends) skip cpp-httplib's parser and router.
  // Answers `ask` into `res`, all but the image: the image to send, or null once answered.
  auto select = [&cache, &calls, authorize_read, fingerprint, finish](const SelectPath& ask,
                                                                     httplib::Response& res) -> std::shared_ptr<const Image> {
    auto allowed = authorize_read(ask.authorization, ask.peer, "GET select");
    if (!allowed) return finish("SelectImage", res, allowed), nullptr;
    res.set_header(header(http_api::k_fingerprint_header), fingerprint);
    auto side = side_in_path(ask.side);
    if (!side) return finish("SelectImage", res, side.error()), nullptr;
    kcache::SelectAsk request;
    request.side = *side;
    request.key = ask.key;
    request.arch = ask.arch;
    if (ask.kind) {
      auto kind = parse_kind(std::string(*ask.kind));
      if (!kind) return finish("SelectImage", res, unknown_kind_error(*ask.kind)), nullptr;
      request.kind = *kind;
    }
    if (ask.driver) {  // 12.4 or 12040, as FetchRequest.driver_version
      auto driver = parse_cuda_version(std::string(*ask.driver));
      if (!driver) return finish("SelectImage", res, driver.error()), nullptr;
      request.driver = *driver;
    }
    auto call = enter_call(calls);
    if (!call) return finish("SelectImage", res, call.error()), nullptr;
    auto found = cache.select(request, reach_here());
    if (!found && is_would_block(found.error())) return defer(), nullptr;
    if (!found) return finish("SelectImage", res, found.error()), nullptr;
    finish("SelectImage", res, {});
    v1::Image meta;
    to_proto(found->image->meta, meta);
    meta.set_needs_jit(found->needs_jit);
    res.set_header(header(http_api::k_image_header), to_hex(meta.SerializeAsString()));
    return std::move(found->image);
  };
  server.fast_get(header(http_api::k_select_prefix), [select, &auth](const PlainGet& req, const Endpoints& ends, httplib::Response& res) {
    // A browser's token may come as a cookie, which only cpp-httplib's route reads.
    if (req.authorization.empty() && auth.enabled()) return false;
    // Exactly /v1/select/{device|host}/KEY/ARCH, as cpp-httplib's route below matches it.
    std::string_view rest = req.path.substr(http_api::k_select_prefix.size());
    if (std::count(rest.begin(), rest.end(), '/') != 2) return false;
    auto first = rest.find('/'), second = rest.find('/', first + 1);
    std::string_view side = rest.substr(0, first), key = rest.substr(first + 1, second - first - 1),
                     arch = rest.substr(second + 1);
    if ((side != "device" && side != "host") || key.empty() || arch.empty()) return false;
    if (auto image = select(SelectPath{side, key, arch, req.param(http_api::k_kind_param), req.param(http_api::k_driver_param), req.authorization,
                                      ends.peer_ip},
                            res)) {
      send_image(nullptr, res, std::move(image));
    }
    return true;
  });
  server.Get(header(http_api::k_select_prefix) + R"(([^/]+)/([^/]+)/([^/]+))",
             [select](const httplib::Request& req, httplib::Response& res) {
    auto param = [&req](std::string_view name) -> std::optional<std::string_view> {
      auto it = req.params.find(std::string(name));
      if (it == req.params.end()) return std::nullopt;
      return it->second;
    };
    const std::string side = req.matches.str(1), key = req.matches.str(2), arch = req.matches.str(3);
    const std::string authorization = http_authorization(req);
    if (auto image = select(SelectPath{side, key, arch, param(http_api::k_kind_param), param(http_api::k_driver_param), authorization,
                                      req.remote_addr},
                            res)) {
      send_image(&req, res, std::move(image));
    }
  });

  server.Get(header(http_api::k_image_prefix) + R"(([^/]+)/([^/]+)/([^/]+)/([^/]+))",
             [&cache, &calls, authorize_read, fingerprint, finish](const httplib::Request& req, httplib::Response& res) {
    auto allowed = authorize_read(http_authorization(req), req.remote_addr, "GET image");
    if (!allowed) return (void)finish("GetImage", res, allowed);
    res.set_header(header(http_api::k_fingerprint_header), fingerprint);
    auto side = side_in_path(req.matches[1].str());
    if (!side) return (void)finish("GetImage", res, side.error());
    auto kind = parse_kind(req.matches[4].str());
    if (!kind) return (void)finish("GetImage", res, unknown_kind_error(req.matches[4].str()));
    // The CLI marks the images of a cached compile, so that compile counts as a hit, as over gRPC.
    std::string compile = req.get_header_value(header(http_api::k_compile_header));
    auto purpose = compile == http_api::k_compile_last   ? Cache::ReadFor::compile_last
                   : compile == http_api::k_compile_part ? Cache::ReadFor::compile_part
                                       : Cache::ReadFor::fetch;
    auto call = enter_call(calls);
    if (!call) return (void)finish("GetImage", res, call.error());
    auto image = cache.read(*side, req.matches[2].str(), ImageRequest{req.matches[3].str(), *kind}, purpose,
                                    reach_here());
    if (!image && is_would_block(image.error())) return defer();
    if (!image) return (void)finish("GetImage", res, image.error());
    finish("GetImage", res, {});
    res.set_header(header(http_api::k_sha256_header), to_hex((*image)->meta.sha256));
    if (!(*image)->meta.stubbed.empty()) {
      std::string stubbed;
      for (const std::string& s : (*image)->meta.stubbed) stubbed += (stubbed.empty() ? "" : ",") + s;
      res.set_header(header(http_api::k_stubbed_header), stubbed);
    }
    send_image(&req, res, std::move(*image));
  });
}

}  // namespace kcache::server
