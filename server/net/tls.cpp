#include "net/tls.hpp"

#include <openssl/ssl.h>

#include <string_view>

namespace kcache::server::net {
namespace {

// OpenSSL's ALPN selection: "h2" when the client offers it, else no agreement (the handshake
// fails, as it would against gRPC's own TLS).
int select_h2(SSL*, const unsigned char** out, unsigned char* out_length, const unsigned char* in,
              unsigned int in_length, void*) {
  static constexpr unsigned char k_h2[] = {2, 'h', '2'};
  unsigned char* selected = nullptr;
  if (SSL_select_next_proto(&selected, out_length, k_h2, sizeof k_h2, in, in_length) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

void SslCtxFree::operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }

Expected<SslCtx> server_tls_context(const TlsFiles& files, const std::string& what, bool alpn_h2) {
  SslCtx ctx(SSL_CTX_new(TLS_server_method()));
  SSL_CTX* c = ctx.get();
  bool ok = c != nullptr && SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION) == 1 &&
            SSL_CTX_use_certificate_chain_file(c, files.cert_file.c_str()) == 1 &&
            SSL_CTX_use_PrivateKey_file(c, files.key_file.c_str(), SSL_FILETYPE_PEM) == 1 &&
            SSL_CTX_check_private_key(c) == 1;
  if (ok && !files.client_ca_file.empty()) {
    ok = SSL_CTX_load_verify_locations(c, files.client_ca_file.c_str(), nullptr) == 1;
    if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(files.client_ca_file.c_str())) {
      SSL_CTX_set_client_CA_list(c, names);
    }
    SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  if (!ok) {
    return make_error(ErrorCode::k_failed_precondition,
                      what + ": cannot use the TLS certificate " + files.cert_file + " with key " + files.key_file);
  }
  SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (alpn_h2) SSL_CTX_set_alpn_select_cb(c, select_h2, nullptr);
  return ctx;
}

}  // namespace kcache::server::net
