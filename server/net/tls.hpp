// The server side of TLS for kcached's own listeners (the gRPC gate and the HTTP listeners):
// OpenSSL contexts made one way, from the --tls-* files.
#pragma once

#include <memory>
#include <string>

#include "kcache/expected.hpp"

typedef struct ssl_ctx_st SSL_CTX;

namespace kcache::server::net {

// PEM files: the server's chain and key, and a client CA that makes client certificates required
// (mutual TLS). All empty: plaintext.
struct TlsFiles {
  std::string cert_file, key_file, client_ca_file;
  bool enabled() const { return !cert_file.empty(); }
};

struct SslCtxFree {
  void operator()(SSL_CTX* ctx) const;
};
using SslCtx = std::unique_ptr<SSL_CTX, SslCtxFree>;

// A TLS 1.2+ server context for `files`, for non-blocking sockets (partial writes allowed).
// `alpn_h2`: the context selects ALPN "h2", which gRPC clients require of a server. `what` names
// the listener in errors ("--listen").
Expected<SslCtx> server_tls_context(const TlsFiles& files, const std::string& what, bool alpn_h2);

}  // namespace kcache::server::net
