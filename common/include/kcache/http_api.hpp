// The HTTP image API's paths and header names (kcached's --http-listen; its routes are described
// beside the daemon's handlers), written once for the daemon that answers and the clients that
// ask: the CLI's fast path and Client::fetch.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kcache/driver.hpp"
#include "kcache/job.hpp"

namespace kcache::http_api {

// GET /v1/fingerprint: the toolchain fingerprint (hex) every key includes.
inline constexpr std::string_view k_fingerprint_path = "/v1/fingerprint";
// GET /v1/select/{device|host}/KEY/ARCH[?kind=K&driver=D]: the image Fetch would send.
inline constexpr std::string_view k_select_prefix = "/v1/select/";
inline constexpr std::string_view k_kind_param = "kind";      // a kind_name
inline constexpr std::string_view k_driver_param = "driver";  // 12.4 or 12040, as FetchRequest.driver_version
// GET /v1/{device|host}/KEY/ARCH/KIND: exactly that image.
inline constexpr std::string_view k_image_prefix = "/v1/";
// The status page (GET /) and its JSON: counters and the newest compiles and errors, the last
// hour's history, and one entry (?side=S&key=K).
inline constexpr std::string_view k_status_path = "/v1/status";
inline constexpr std::string_view k_status_history_path = "/v1/status/history";
inline constexpr std::string_view k_status_entry_path = "/v1/status/entry";
// A browser's token, as a cookie, where it cannot send an Authorization header.
inline constexpr std::string_view k_token_cookie = "kcache_token";
// Where a browser trades a read token (?token=TOKEN, from the refusal page's form) for that cookie,
// set HttpOnly and SameSite=Strict by the daemon, then goes to the status page.
inline constexpr std::string_view k_session_path = "/v1/session";

// "/v1/SIDE/KEY/ARCH/KIND": `key` and `arch` as given (a client sends its own canonical ones).
std::string image_path(Side side, std::string_view key, std::string_view arch, ImageKind kind);
// "/v1/select/SIDE/KEY/ARCH", then ?kind=K when `kind` is given and driver=D (cuDriverGetVersion's
// number) when `driver` is not 0. `key` and `arch`, which come from a caller, are percent-encoded
// but for [A-Za-z0-9_.-].
std::string select_path(Side side, std::string_view key, std::string_view arch, std::optional<ImageKind> kind,
                        CudaVersion driver);

// Header names as sent (HTTP matches names in any case).
// Every answer to an authorized caller: the daemon's fingerprint, so a client whose key was
// computed with another one notices.
inline constexpr std::string_view k_fingerprint_header = "X-Kcache-Fingerprint";
// A select answer: the image's metadata, a serialized kcache.v1.Image (with needs_jit), in hex.
inline constexpr std::string_view k_image_header = "X-Kcache-Image";
// An image: the SHA-256 of its bytes (hex).
inline constexpr std::string_view k_sha256_header = "X-Kcache-Sha256";
// An image: the transfer checksum of its bytes (kcache/checksum.hpp), cheaper to check than the SHA-256.
inline constexpr std::string_view k_xxh3_header = "X-Kcache-Xxh3";
// A host object built with stubs: the device-only symbols stubbed, comma-separated.
inline constexpr std::string_view k_stubbed_header = "X-Kcache-Stubbed";
// An error (a text/plain message): the name of its gRPC code (INVALID_ARGUMENT).
inline constexpr std::string_view k_error_header = "X-Kcache-Error";
// Sent by the CLI's fast path with each image of a cached compile, "part", and "last" with its
// last one: the daemon counts the compile as one hit, as the gRPC Compile would; any other read is
// a fetch.
inline constexpr std::string_view k_compile_header = "X-Kcache-Compile";
inline constexpr std::string_view k_compile_part = "part";
inline constexpr std::string_view k_compile_last = "last";

}  // namespace kcache::http_api
