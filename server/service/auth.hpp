// Bearer-token authentication with roles. A tokens file holds one client per line:
//
//   # NAME  ROLE     TOKEN
//   ci      compile  3f9a...            (role: read, compile or admin)
//
// Each role includes the ones before it. Tokens are kept only as SHA-256 digests and never
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

enum class Role { read = 1, compile = 2, admin = 3 };

const char* role_name(Role role);

class Authenticator {
 public:
  Authenticator() = default;  // open: every call allowed
  // Reads a tokens file; FAILED_PRECONDITION naming the line for a malformed one.
  static Expected<Authenticator> load(const std::filesystem::path& path);

  bool enabled() const { return m_enabled; }
  std::size_t clients() const { return m_clients.size(); }

  // OK when the call carries a token whose role includes `needed`; UNAUTHENTICATED without a
  // known token, PERMISSION_DENIED with one whose role falls short. Logs denials.
  Expected<void> check(const grpc::ServerContextBase& context, Role needed, const char* method) const;
  // The same for any transport: `authorization` is the header's value ("Bearer TOKEN" or empty),
  // `peer` names the caller in the log.
  Expected<void> check(std::string_view authorization, const std::string& peer, Role needed, const char* method) const;

 private:
  struct Client {
    std::string name;
    Role role = Role::read;
  };
  bool m_enabled = false;
  std::map<Digest, Client> m_clients;  // by SHA-256 of the token
};

}  // namespace kcache::server
