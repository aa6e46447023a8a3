#include "api/call_gate.hpp"

#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>

#include <cstdlib>

#include "metrics.hpp"
#include "api/auth.hpp"
#include "api/service.hpp"
#include "wire/wire.hpp"

namespace kcache::server {
namespace {

constexpr std::string_view k_kcache_prefix = "/kcache.v1.KCache/";
constexpr std::string_view k_health_prefix = "/grpc.health.v1.Health/";
constexpr std::string_view k_reflection_prefix = "/grpc.reflection.";

std::string_view view(const grpc_slice& slice) {
  return {reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(slice)), GRPC_SLICE_LENGTH(slice)};
}

// grpc_auth_metadata_processor::process: runs on a gRPC thread when a call's headers have
// arrived and answers at once (a digest lookup); the call waits for nothing else.
void process_headers(void* state, grpc_auth_context*, const grpc_metadata* metadata, std::size_t count,
                     grpc_process_auth_metadata_done_cb done, void* user_data) {
  const CallGate& gate = **static_cast<std::shared_ptr<const CallGate>*>(state);
  std::string_view path, authorization;
  bool seen_authorization = false;
  for (std::size_t i = 0; i < count; ++i) {
    std::string_view key = view(metadata[i].key);
    if (key == ":path") {
      path = view(metadata[i].value);
    } else if (key == "authorization" && !seen_authorization) {  // the first, as handlers read it
      authorization = view(metadata[i].value);
      seen_authorization = true;
    }
  }
  auto allowed = gate.check(path, authorization);
  if (allowed) return done(user_data, nullptr, 0, nullptr, 0, GRPC_STATUS_OK, nullptr);
  grpc::Status status = wire::to_status(allowed.error());
  // gRPC copies the message before this returns.
  done(user_data, nullptr, 0, nullptr, 0, static_cast<grpc_status_code>(status.error_code()),
       status.error_message().c_str());
}

void destroy_state(void* state) { delete static_cast<std::shared_ptr<const CallGate>*>(state); }

// Core insecure credentials with kcached's processor, for a grpc::ServerBuilder.
class GatedServerCredentials final : public grpc::ServerCredentials {
 public:
  explicit GatedServerCredentials(std::shared_ptr<const CallGate> gate) {
    // The base class has initialized gRPC: core calls are allowed from here on.
    m_core = grpc_insecure_server_credentials_create();
    if (gate) {
      grpc_server_credentials_set_auth_metadata_processor(
          m_core, {process_headers, destroy_state, new std::shared_ptr<const CallGate>(std::move(gate))});
    }
  }
  ~GatedServerCredentials() override { grpc_server_credentials_release(m_core); }

  // kcached sets its own processor in the constructor; a second would silently replace it.
  void SetAuthMetadataProcessor(const std::shared_ptr<grpc::AuthMetadataProcessor>&) override { std::abort(); }

 private:
  int AddPortToServer(const std::string& address, grpc_server* server) override {
    return grpc_server_add_http2_port(server, address.c_str(), m_core);
  }

  grpc_server_credentials* m_core = nullptr;
};

}  // namespace

Expected<void> CallGate::check(std::string_view path, std::string_view authorization) const {
  if (path.starts_with(k_health_prefix)) return {};
  if (m_reflection && path.starts_with(k_reflection_prefix)) return {};
  std::optional<Role> needed;
  if (path.starts_with(k_kcache_prefix)) needed = KCacheService::role_needed(path.substr(k_kcache_prefix.size()));
  // A method kcached does not define is named "an unknown method" in the log: its name is the
  // caller's choice, of any length.
  const std::string method = needed ? std::string(path.substr(k_kcache_prefix.size())) : "an unknown method";
  // The peer's address is not known to gRPC's auth filter; a refused client with a token is
  // logged by its name.
  auto allowed = m_auth.check(authorization, "a peer refused on its headers", needed.value_or(Role::read),
                              method.c_str());
  if (!allowed) m_metrics.count_call(path, wire::to_status(allowed.error()).error_code());
  return allowed;
}

std::shared_ptr<grpc::ServerCredentials> gated_server_credentials(std::shared_ptr<const CallGate> gate) {
  return std::make_shared<GatedServerCredentials>(std::move(gate));
}

}  // namespace kcache::server
