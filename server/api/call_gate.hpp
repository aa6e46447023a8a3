// The token check on a gRPC call's headers, before gRPC reads its message (issue 14).
//
// A KCache handler (and any server interceptor) runs only once gRPC has read the whole request:
// 64 unauthenticated 64 MiB Compiles made kcached buffer them all before a token was looked at.
// gRPC core instead runs a server credentials' auth metadata processor in its server auth filter
// as soon as a call's initial metadata arrives, and holds the call there; a status other than OK
// cancels the call with that status, so its message is never read (the peer's flow-control window
// at most, then RST_STREAM), no handler or interceptor runs and no metadata is sent back
// (src/core/lib/security/transport/server_auth_filter.cc, recv_initial_metadata_ready). The
// filter is on every server channel whose credentials are a core grpc_server_credentials, the
// insecure ones included (maybe_prepend_server_auth_filter in src/core/lib/surface/init.cc keys on
// GRPC_SERVER_CREDENTIALS_ARG). gRPC++ 1.51 only lets SslServerCredentials take a processor
// (InsecureServerCredentials asserts), so kcached wraps core insecure credentials itself (TLS is
// the gRPC gate's) and sets the processor through the C API.
//
// The headers carry ":path", so the gate checks the role each method needs, not just the token;
// handlers check again to learn the caller's name for the log. The health service, and
// reflection when served, stay open.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kcache/expected.hpp"

namespace kcache::server {

class Authenticator;
class Metrics;

class CallGate {
 public:
  // `reflection`: whether the reflection service is served (it then needs no token).
  CallGate(const Authenticator& auth, Metrics& metrics, bool reflection)
      : m_auth(auth), m_metrics(metrics), m_reflection(reflection) {}

  // OK when a call to `path` ("/kcache.v1.KCache/Compile") with this "authorization" header may
  // go on; else UNAUTHENTICATED (no or an unknown token) or PERMISSION_DENIED (the token's role
  // falls short of the method's), with the messages handlers give, counted in the metrics. A
  // method kcached does not define needs a token of any role.
  Expected<void> check(std::string_view path, std::string_view authorization) const;

 private:
  const Authenticator& m_auth;
  Metrics& m_metrics;
  const bool m_reflection;
};

// Plaintext gRPC server credentials whose every call passes `gate` on its headers first (none:
// every call goes on to its handler). TLS is the gRPC gate's (net/grpc_gate.hpp): gRPC itself
// serves only the gate, on a Unix socket.
std::shared_ptr<grpc::ServerCredentials> gated_server_credentials(std::shared_ptr<const CallGate> gate);

}  // namespace kcache::server
