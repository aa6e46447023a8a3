#include "service/auth.hpp"

#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>

namespace kcache::server {
namespace {

constexpr std::string_view k_bearer = "Bearer ";

std::optional<Role> parse_role(const std::string& name) {
  if (name == "read") return Role::read;
  if (name == "compile") return Role::compile;
  if (name == "admin") return Role::admin;
  return std::nullopt;
}

}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::read: return "read";
    case Role::compile: return "compile";
    case Role::admin: return "admin";
  }
  return "?";
}

Expected<Authenticator> Authenticator::load(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return make_error(ErrorCode::k_failed_precondition, "cannot read the tokens file " + path.string());
  Authenticator auth;
  auth.m_enabled = true;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream fields(line);
    std::string name, role, token, extra;
    if (!(fields >> name)) continue;  // blank or comment
    auto where = [&] { return path.string() + ":" + std::to_string(number); };
    if (!(fields >> role >> token) || (fields >> extra)) {
      return make_error(ErrorCode::k_failed_precondition, where() + ": expected NAME ROLE TOKEN");
    }
    auto parsed = parse_role(role);
    if (!parsed) {
      return make_error(ErrorCode::k_failed_precondition,
                        where() + ": unknown role '" + role + "' (read, compile or admin)");
    }
    if (token.size() < 16) {
      return make_error(ErrorCode::k_failed_precondition,
                        where() + ": the token of '" + name + "' is shorter than 16 characters");
    }
    if (!auth.m_clients.emplace(sha256(token), Client{name, *parsed}).second) {
      return make_error(ErrorCode::k_failed_precondition, where() + ": a token given twice");
    }
  }
  if (auth.m_clients.empty()) {
    return make_error(ErrorCode::k_failed_precondition, "the tokens file " + path.string() + " names no client");
  }
  return auth;
}

Expected<void> Authenticator::check(const grpc::ServerContextBase& context, Role needed, const char* method) const {
  if (!m_enabled) return {};
  const auto& metadata = context.client_metadata();
  auto header = metadata.find("authorization");
  std::string_view value = header == metadata.end() ? std::string_view()
                                                     : std::string_view(header->second.data(), header->second.size());
  return check(value, context.peer(), needed, method);
}

Expected<void> Authenticator::check(std::string_view authorization, const std::string& peer, Role needed,
                                    const char* method) const {
  if (!m_enabled) return {};
  if (!authorization.starts_with(k_bearer)) {
    spdlog::warn("denied {} from {}: no bearer token", method, peer);
    return make_error(ErrorCode::k_unauthenticated,
                      "kcached needs a token: send 'authorization: Bearer TOKEN' (kcache: --token-file or KCACHE_TOKEN)");
  }
  authorization.remove_prefix(k_bearer.size());
  auto client = m_clients.find(sha256(authorization));
  if (client == m_clients.end()) {
    spdlog::warn("denied {} from {}: unknown token", method, peer);
    return make_error(ErrorCode::k_unauthenticated, "kcached does not know this token");
  }
  if (client->second.role < needed) {
    spdlog::warn("denied {} to client '{}' (role {}, needs {})", method, client->second.name,
                 role_name(client->second.role), role_name(needed));
    return make_error(ErrorCode::k_permission_denied, std::string(method) + " needs the " + role_name(needed) +
                                                          " role; client '" + client->second.name + "' has " +
                                                          role_name(client->second.role));
  }
  return {};
}

}  // namespace kcache::server
