#include "kcache/client.hpp"

#include <grpcpp/grpcpp.h>

#include <cstdlib>

#include "kcache/sha256.hpp"
#include "wire/wire.hpp"

namespace kcache {

std::string resolve_server(std::string_view flag) {
  if (!flag.empty()) return std::string(flag);
  if (const char* env = std::getenv("KCACHE_SERVER"); env != nullptr && *env != '\0') return env;
  return std::string(k_default_server);
}

Client::Client(ClientOptions options) : m_options(std::move(options)) {
  // gRPC's default limits stay: large images arrive through the streamed Fetch. (Sending is
  // unlimited by default; the daemon enforces its module limit with a clear message.)
  m_stub = v1::KCache::NewStub(grpc::CreateChannel(m_options.server, grpc::InsecureChannelCredentials()));
}

std::unique_ptr<grpc::ClientContext> Client::context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + m_options.deadline);
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
  grpc::Status s = m_stub->GetCapabilities(context().get(), v1::GetCapabilitiesRequest(), &caps);
  if (!s.ok()) return error(s);
  m_capabilities = caps;
  return caps;
}

Expected<Key> Client::compute_key(const v1::CompileRequest& request) {
  auto caps = capabilities();
  if (!caps) return caps.error();
  auto fingerprint = digest_from_hex(caps->fingerprint());
  if (!fingerprint) return make_error(ErrorCode::k_internal, "kcached sent a malformed fingerprint");
  auto spec = wire::job_spec(request, caps->host_triple());
  if (!spec) return spec.error();
  return kcache::compute_key(*spec, request.module(), *fingerprint);
}

Expected<v1::CompileResponse> Client::compile(const v1::CompileRequest& request) {
  v1::CompileResponse response;
  grpc::Status s = m_stub->Compile(context().get(), request, &response);
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

Expected<FetchedImage> Client::fetch(const v1::FetchRequest& request) {
  auto ctx = context();
  auto reader = m_stub->Fetch(ctx.get(), request);
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

Expected<v1::LookupResponse> Client::lookup(const v1::LookupRequest& request) {
  v1::LookupResponse response;
  grpc::Status s = m_stub->Lookup(context().get(), request, &response);
  if (!s.ok()) return error(s);
  return response;
}

Expected<v1::Stats> Client::stats() {
  v1::Stats stats;
  grpc::Status s = m_stub->GetStats(context().get(), v1::GetStatsRequest(), &stats);
  if (!s.ok()) return error(s);
  return stats;
}

}  // namespace kcache
