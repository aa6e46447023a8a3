// Bearer-token authentication with roles. A tokens file holds one client per line:
//
//   # NAME  ROLE     TOKEN
//   ci      compile  3f9a...            (role: read, compile, publish or admin)
//
// Each role includes the ones before it. publish is compile plus writing what other machines
// link: a host object or whole-compile entry that the client compiled itself (a Step's offer).
// Give it to trusted CI machines only; a compile client's offers are refused. Tokens are kept only as SHA-256 digests and never
// logged; a denied call is logged with the client's NAME (or "unknown token").
#pragma once

#include <grpcpp/server_context.h>

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "kcache/expected.hpp"
#include "kcache/sha256.hpp"

namespace kcache::server {

enum class Role { read = 1, compile = 2, publish = 3, admin = 4 };

const char* role_name(Role role);

class Authenticator {
 public:
  Authenticator() = default;  // open: every call allowed
  // Reads a tokens file; FAILED_PRECONDITION naming the line for a malformed one, and for a file
  // that others may write (anyone on the machine could add an admin token to it).
  static Expected<Authenticator> load(const std::filesystem::path& path);

  bool enabled() const { return m_enabled; }
  std::size_t clients() const { return m_clients.size(); }

  // OK when the call carries a token whose role includes `needed`; UNAUTHENTICATED without a
  // known token, PERMISSION_DENIED with one whose role falls short. Logs denials. When allowed,
  // `client` (if given) gets who called, for the log: the token's NAME, or the peer without tokens.
  Expected<void> check(const grpc::ServerContextBase& context, Role needed, const char* method,
                       std::string* client = nullptr) const;
  // The same for any transport: `authorization` is the header's value ("Bearer TOKEN", the
  // scheme in any case as RFC 7235 has it, or empty), `peer` names the caller in the log.
  Expected<void> check(std::string_view authorization, const std::string& peer, Role needed, const char* method,
                       std::string* client = nullptr) const;

 private:
  struct Client {
    std::string name;
    Role role = Role::read;
  };
  bool m_enabled = false;
  std::map<Digest, Client> m_clients;  // by SHA-256 of the token
};

}  // namespace kcache::server
