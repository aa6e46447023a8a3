#include "kcache/client.hpp"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "endpoint.hpp"
#include "grpc/health/v1/health.grpc.pb.h"
#include "http_get.hpp"
#include "input_file.hpp"
#include "kcache/checksum.hpp"
#include "kcache/http_api.hpp"
#include "kcache/sha256.hpp"
#include "wire/wire.hpp"

namespace kcache {

namespace {

// The most a PEM file (a CA bundle, a certificate chain, a key) may hold.
constexpr std::uint64_t k_max_pem_file_bytes = 16 << 20;

// A PEM file's text; empty when it cannot be read (gRPC then says the TLS setup is bad): a FIFO,
// a device or a file past k_max_pem_file_bytes is not read.
std::string read_text(const std::string& path) {
  auto text = read_input_file(path, {k_max_pem_file_bytes, "kcache's limit on a PEM file"});
  return text ? std::move(*text) : std::string();
}

std::shared_ptr<grpc::ChannelCredentials> channel_credentials(const ClientOptions& o) {
  if (!o.tls) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!o.tls_ca_file.empty()) ssl.pem_root_certs = read_text(o.tls_ca_file);
  if (!o.tls_cert_file.empty()) {
    ssl.pem_cert_chain = read_text(o.tls_cert_file);
    ssl.pem_private_key = read_text(o.tls_key_file);
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace

Client::Client(ClientOptions options) : m_options(std::move(options)) { reconnect(); }

Client::~Client() = default;  // here, where HttpConnection is complete

void Client::reconnect() {
  // Large images arrive through the streamed Fetch, but a build step's reply carries its files
  // whole: cicc's for code using Thrust and CUB came to 4.8 MB, past gRPC's 4 MiB default, so the
  // launcher ran every such step itself. Replies are taken up to one step output's bound
  // (k_max_step_output, 256 MiB); a larger one fails the call, and the launcher runs the step.
  // (Sending is unlimited by default; the daemon enforces its module limit with a clear message.)
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  // A channel of its own (not gRPC's process-wide subchannel pool), so a reconnect starts afresh.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Room for an error's whole report (kcache.v1.ErrorReport in the status details), which every
  // call asks for: a refusal can name a thousand symbols, each with its users.
  args.SetInt(GRPC_ARG_MAX_METADATA_SIZE, static_cast<int>(2 * wire::k_full_report_bytes));
  auto channel = grpc::CreateCustomChannel(m_options.server, channel_credentials(m_options), args);
  auto stub = v1::KCache::NewStub(channel);
  std::lock_guard lock(m_stub_mutex);
  m_stub = std::move(stub);
  m_channel = std::move(channel);
}

std::shared_ptr<v1::KCache::Stub> Client::stub() const {
  std::lock_guard lock(m_stub_mutex);
  return m_stub;
}

std::unique_ptr<grpc::ClientContext> Client::context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + m_options.deadline);
  if (!m_options.token.empty()) ctx->AddMetadata("authorization", "Bearer " + m_options.token);
  ctx->AddMetadata(wire::k_full_report_header, "full");
  return ctx;
}

Error Client::error(const grpc::Status& status) const {
  Error e = wire::from_status(status);
  if (e.code == ErrorCode::k_unavailable) {
    e.message = "cannot reach kcached at " + m_options.server + ": " + e.message +
                " (is it running? set --server or KCACHE_SERVER)";
  } else if (e.code == ErrorCode::k_deadline_exceeded) {
    e.message = "kcached at " + m_options.server + " did not answer in time: " + e.message;
  }
  return e;
}

Expected<v1::Capabilities> Client::capabilities(bool refresh) {
  std::lock_guard lock(m_capabilities_mutex);
  if (m_capabilities && !refresh) return *m_capabilities;
  v1::Capabilities caps;
  grpc::Status s = stub()->GetCapabilities(context().get(), v1::GetCapabilitiesRequest(), &caps);
  if (!s.ok()) return error(s);
  m_capabilities = caps;
  return caps;
}

Expected<Key> Client::compute_key(const v1::CompileRequest& request) {
  auto caps = capabilities();
  if (!caps) return caps.error();
  auto fingerprint = digest_from_hex(caps->fingerprint());
  if (!fingerprint) return make_error(ErrorCode::k_internal, "kcached sent a malformed fingerprint");
  auto spec = wire::job_spec(request, caps->host_triple(), static_cast<int>(caps->ptx_isa_version()));
  if (!spec) return spec.error();
  return kcache::compute_key(*spec, wire::modules_of(request), *fingerprint);
}

Expected<v1::CompileResponse> Client::compile(const v1::CompileRequest& request) {
  return with_retries([&] { return compile_once(request); });
}

Expected<v1::CompileResponse> Client::compile_once(const v1::CompileRequest& request) {
  v1::CompileResponse response;
  grpc::Status s = stub()->Compile(context().get(), request, &response);
  if (!s.ok()) return error(s);
  if (request.digests_only()) return response;
  // Images past the reply's inline budget come without bytes: stream each one.
  for (v1::Image& image : *response.mutable_images()) {
    if (image.data().size() == image.size()) continue;
    v1::FetchRequest fetch;
    fetch.set_key(response.key());
    fetch.set_side(request.side() == v1::SIDE_HOST ? v1::SIDE_HOST : v1::SIDE_DEVICE);
    fetch.set_arch(image.arch());
    fetch.set_kind(image.kind());
    auto fetched = this->fetch(fetch);
    if (!fetched) return fetched.error();
    image.set_data(std::move(fetched->data));
  }
  return response;
}

namespace {

std::optional<ErrorCode> error_code_named(std::string_view name) {
  for (int c = 0; c <= 16; ++c) {
    auto code = static_cast<ErrorCode>(c);
    if (name == error_code_name(code) && name != "UNKNOWN") return code;
  }
  return std::nullopt;
}

}  // namespace

std::optional<Expected<FetchedImage>> Client::fetch_over_http(const v1::FetchRequest& request) {
  if (!m_options.http_fetch || m_options.tls) return std::nullopt;
  // A number its enum does not define goes over gRPC, where the daemon names it (INVALID_ARGUMENT).
  if (!v1::Side_IsValid(request.side()) || !v1::ImageKind_IsValid(request.kind())) return std::nullopt;
  int http_port = 0;
  {
    // The port alone, not a copy of the whole Capabilities message on every fetch.
    std::unique_lock lock(m_capabilities_mutex);
    if (m_capabilities) {
      http_port = static_cast<int>(m_capabilities->http_port());
    } else {
      lock.unlock();
      auto caps = capabilities();
      if (caps) http_port = static_cast<int>(caps->http_port());
    }
  }
  if (http_port == 0) return std::nullopt;
  std::string path = http_api::select_path(request.side() == v1::SIDE_HOST ? Side::host : Side::device, request.key(),
                                           request.arch(), wire::from_proto(request.kind()), request.driver_version());
  std::vector<std::pair<std::string, std::string>> headers;
  if (!m_options.token.empty()) headers.emplace_back("Authorization", "Bearer " + m_options.token);

  // A kept-alive connection may have been closed by the daemon since: then once more, fresh.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::optional<HttpConnection> connection;
    {
      std::lock_guard lock(m_http_mutex);
      if (!m_http_idle.empty()) {
        connection.emplace(std::move(m_http_idle.back()));
        m_http_idle.pop_back();
      }
    }
    bool reused = connection.has_value();
    if (!connection) {
      auto opened = HttpConnection::open(server_host(m_options.server), http_port,
                                         m_options.deadline);
      if (!opened) return std::nullopt;
      connection.emplace(std::move(*opened));
    }
    auto reply = connection->get(path, headers);
    if (!reply) {
      if (reused) continue;
      return std::nullopt;
    }
    if (connection->reusable()) {  // read whole, nothing after it, not closing
      std::lock_guard lock(m_http_mutex);
      m_http_idle.push_back(std::move(*connection));
    }
    if (reply->status != 200) {
      auto code = error_code_named(reply->header(http_api::k_error_header));
      if (!code) return std::nullopt;  // not kcached's answer: let gRPC say what is wrong
      std::string message = reply->body;
      while (!message.empty() && std::isspace(static_cast<unsigned char>(message.back()))) message.pop_back();
      return Expected<FetchedImage>(make_error(*code, message));
    }
    FetchedImage out;
    auto meta = bytes_from_hex(reply->header(http_api::k_image_header));
    if (!meta || !out.image.ParseFromString(*meta)) return std::nullopt;
    out.data = std::move(reply->body);
    // kcached's checksum of bytes it verified against the SHA-256 (kcache/checksum.hpp), at a
    // thirtieth of the cost of hashing them again here; a daemon without it gets the SHA-256 check.
    std::string_view checksum = reply->header(http_api::k_xxh3_header);
    bool intact = checksum.empty() ? sha256_hex(out.data) == out.image.sha256()
                                   : transfer_checksum_hex(out.data) == checksum;
    if (!intact || out.data.size() != out.image.size()) {
      return Expected<FetchedImage>(make_error(
          ErrorCode::k_internal, "the fetched image does not match its " + std::string(checksum.empty() ? "SHA-256 digest" : "checksum") +
                                     " (" + std::to_string(out.data.size()) + " bytes received)"));
    }
    return Expected<FetchedImage>(std::move(out));
  }
  return std::nullopt;
}

Expected<FetchedImage> Client::fetch(const v1::FetchRequest& request) {
  return with_retries([&] { return fetch_once(request); });
}

Expected<FetchedImage> Client::fetch_once(const v1::FetchRequest& request) {
  if (auto over_http = fetch_over_http(request)) return std::move(*over_http);
  auto ctx = context();
  auto reader = stub()->Fetch(ctx.get(), request);
  FetchedImage out;
  v1::FetchResponse message;
  bool first = true;
  while (reader->Read(&message)) {
    if (first) {
      out.image = message.image();
      out.data.reserve(out.image.size());
      first = false;
    }
    out.data.append(message.chunk());
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return error(s);
  if (first) return make_error(ErrorCode::k_internal, "kcached ended the fetch without sending an image");
  if (sha256_hex(out.data) != out.image.sha256()) {
    return make_error(ErrorCode::k_internal, "the fetched image does not match its SHA-256 digest (" +
                                                 std::to_string(out.data.size()) + " bytes received)");
  }
  return out;
}

template <typename Call>
auto Client::with_retries(Call call) -> decltype(call()) {
  auto backoff = std::chrono::milliseconds(50);
  // The call's deadline bounds its retries too: a caller that gives a call one second does not
  // wait four on an unreachable daemon.
  auto give_up = std::chrono::steady_clock::now() + m_options.deadline;
  for (int attempt = 1;; ++attempt) {
    auto result = call();
    if (result || result.error().code != ErrorCode::k_unavailable || attempt >= m_options.max_attempts ||
        std::chrono::steady_clock::now() + backoff > give_up) {
      return result;
    }
    ++m_retries;
    std::this_thread::sleep_for(backoff);
    // A fresh channel connects at once; an old one that saw the daemon go away waits out
    // gRPC's reconnect backoff, with its connection attempts polled only now and then.
    reconnect();
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

Expected<FetchedImage> Client::fetch_or_compile(const v1::CompileRequest& request, const std::string& device_arch) {
  // The device's arch joins the job's archs before the key is computed: archs name images under
  // a key, not the key, but an AMD target ID (gfx...) implies the job's target triple.
  v1::CompileRequest compile_request = request;
  bool has_arch = std::find(request.archs().begin(), request.archs().end(), device_arch) != request.archs().end();
  if (!has_arch && request.side() != v1::SIDE_HOST) compile_request.add_archs(device_arch);
  auto key = with_retries([&] { return compute_key(compile_request); });
  if (!key) return key.error();
  v1::FetchRequest fetch_request;
  fetch_request.set_key(key->hex());
  fetch_request.set_arch(device_arch);
  fetch_request.set_side(request.side() == v1::SIDE_HOST ? v1::SIDE_HOST : v1::SIDE_DEVICE);
  fetch_request.set_driver_version(request.driver_version());
  auto fetched = fetch(fetch_request);
  if (fetched || fetched.error().code != ErrorCode::k_not_found) return fetched;

  compile_request.set_digests_only(true);
  auto compiled = compile(compile_request);
  if (!compiled) return compiled.error();
  if (compiled->key() != key->hex()) {
    // The daemon's toolchain changed since the fingerprint was cached: take the new one.
    if (auto refreshed = with_retries([&] { return capabilities(true); }); !refreshed) return refreshed.error();
    fetch_request.set_key(compiled->key());
  }
  return fetch(fetch_request);
}

Expected<v1::LookupResponse> Client::lookup(const v1::LookupRequest& request) {
  v1::LookupResponse response;
  grpc::Status s = stub()->Lookup(context().get(), request, &response);
  if (!s.ok()) return error(s);
  return response;
}

Expected<v1::Stats> Client::stats() {
  v1::Stats stats;
  grpc::Status s = stub()->GetStats(context().get(), v1::GetStatsRequest(), &stats);
  if (!s.ok()) return error(s);
  return stats;
}

Expected<v1::StepResponse> Client::step(const v1::StepRequest& request) {
  v1::StepResponse response;
  grpc::Status s = stub()->Step(context().get(), request, &response);
  if (!s.ok()) return error(s);
  return response;
}

Expected<void> Client::report_uncacheable(std::string_view reason) {
  v1::UncacheableReport report;
  report.set_reason(std::string(reason));
  v1::UncacheableReply reply;
  grpc::Status s = stub()->ReportUncacheable(context().get(), report, &reply);
  if (!s.ok()) return error(s);
  return {};
}

Expected<void> Client::health() {
  std::shared_ptr<grpc::Channel> channel;
  {
    std::lock_guard lock(m_stub_mutex);
    channel = m_channel;
  }
  grpc::health::v1::HealthCheckResponse response;
  grpc::Status s = grpc::health::v1::Health::NewStub(channel)->Check(context().get(), {}, &response);
  if (!s.ok()) return error(s);
  if (response.status() != grpc::health::v1::HealthCheckResponse::SERVING) {
    return make_error(ErrorCode::k_unavailable, "kcached at " + m_options.server + " is not serving (" +
                                                    grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
                                                        response.status()) +
                                                    ")");
  }
  return {};
}

Expected<v1::VerifyResponse> Client::verify(bool repair) {
  v1::VerifyRequest request;
  request.set_repair(repair);
  v1::VerifyResponse response;
  grpc::Status s = stub()->Verify(context().get(), request, &response);
  if (!s.ok()) return error(s);
  return response;
}

Expected<v1::EvictResponse> Client::evict(const v1::EvictRequest& request) {
  v1::EvictResponse response;
  grpc::Status s = stub()->Evict(context().get(), request, &response);
  if (!s.ok()) return error(s);
  return response;
}

Expected<v1::PurgeResponse> Client::purge() {
  v1::PurgeResponse response;
  grpc::Status s = stub()->Purge(context().get(), v1::PurgeRequest(), &response);
  if (!s.ok()) return error(s);
  return response;
}

}  // namespace kcache
