// The image read API over HTTP/1.1 (--http-listen), beside gRPC, as bazel-remote serves HTTP
// beside its gRPC API. It exists for the command-line hit: `kcache compile` of a cached kernel
// computes the key itself and needs one GET, without paying gRPC's start-up (bench/README.md).
//
//   GET /v1/fingerprint                  the toolchain fingerprint (hex) every key includes
//   GET /v1/{device|host}/KEY/ARCH/KIND  exactly that image's bytes; 404 when not stored. No
//                                        selection rules: a compile asks for what it named.
//   GET /v1/select/{device|host}/KEY/ARCH[?kind=K]
//                                        what Fetch would send: the best image for a device
//                                        by CUDA's rules, with its metadata (a serialized
//                                        kcache.v1.Image) in X-Kcache-Image as hex.
//
// Every answer to an authorized caller carries X-Kcache-Fingerprint, so a client that computed KEY
// with a stale one notices; an unauthorized one learns nothing. The CLI's fast path sends
// "X-Kcache-Compile: part" with each image of a cached compile and "last" with its last one: the
// compile counts as one hit, as the gRPC Compile would count it; any other read is a fetch. An image carries X-Kcache-Sha256 and, for host objects built with stubs,
// X-Kcache-Stubbed (comma-separated). Tokens as for gRPC ("Authorization: Bearer TOKEN", the read
// role), or, from a browser, the cookie kcache_token=TOKEN (http_authorization). Errors are
// text/plain messages with the gRPC code's name in X-Kcache-Error. The status page's routes are
// api/status_page.hpp's.
#pragma once

#include <string>

namespace httplib {
struct Request;
}

namespace kcache::server {

class Authenticator;
class Cache;
class CallTracker;
class Metrics;
class Router;

// What a request carries as its credentials, as an Authorization value ("Bearer TOKEN"): its
// Authorization header, else its cookie kcache_token as a bearer token, else empty.
std::string http_authorization(const httplib::Request& req);

// The routes, answered by `cache` for callers `auth` lets read; each call is counted in `calls`
// (the drain's) and in `metrics`.
void add_http_api_routes(Router& server, Cache& cache, const Authenticator& auth, CallTracker& calls, Metrics& metrics);

}  // namespace kcache::server
