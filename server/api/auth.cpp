#include "api/auth.hpp"

#include "net/grpc_gate.hpp"

#include <spdlog/spdlog.h>

#include <fstream>
#include <sstream>

namespace kcache::server {
namespace {

// The token of an "authorization" value, or empty when it is not "Bearer TOKEN". The scheme is
// case-insensitive (RFC 7235, 2.1) and may be followed by more than one space.
std::string_view bearer_token(std::string_view authorization) {
  constexpr std::string_view k_scheme = "bearer";
  if (authorization.size() <= k_scheme.size() || authorization[k_scheme.size()] != ' ') return {};
  for (std::size_t i = 0; i < k_scheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization[i])) != k_scheme[i]) return {};
  }
  std::string_view token = authorization.substr(k_scheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  return token;
}

std::optional<Role> parse_role(const std::string& name) {
  if (name == "read") return Role::read;
  if (name == "compile") return Role::compile;
  if (name == "publish") return Role::publish;
  if (name == "admin") return Role::admin;
  return std::nullopt;
}

}  // namespace

const char* role_name(Role role) {
  switch (role) {
    case Role::read: return "read";
    case Role::compile: return "compile";
    case Role::publish: return "publish";
    case Role::admin: return "admin";
  }
  return "?";
}

Expected<Authenticator> Authenticator::load(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return make_error(ErrorCode::k_failed_precondition, "cannot read the tokens file " + path.string());
  // Refused rather than warned about: a daemon that starts anyway has already trusted the file.
  std::error_code ec;
  auto perms = std::filesystem::status(path, ec).permissions();
  if (!ec && (perms & std::filesystem::perms::others_write) != std::filesystem::perms::none) {
    return make_error(ErrorCode::k_failed_precondition,
                      "the tokens file " + path.string() +
                          " is writable by every user, who could add an admin token to it: chmod o-w (or 600) it");
  }
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

Expected<void> Authenticator::check(const grpc::ServerContextBase& context, Role needed, const char* method,
                                    std::string* client) const {
  const auto& metadata = context.client_metadata();
  auto header = metadata.find("authorization");
  std::string_view value = header == metadata.end() ? std::string_view()
                                                     : std::string_view(header->second.data(), header->second.size());
  return check(value, net::client_of_peer(context.peer()), needed, method, client);
}

Expected<void> Authenticator::check(std::string_view authorization, const std::string& peer, Role needed,
                                    const char* method, std::string* who) const {
  if (!m_enabled) {
    if (who != nullptr) *who = peer;
    return {};
  }
  std::string_view token = bearer_token(authorization);
  if (token.empty()) {
    spdlog::warn("denied {} from {}: no bearer token", method, peer);
    return make_error(ErrorCode::k_unauthenticated,
                      "kcached needs a token: send 'authorization: Bearer TOKEN' (kcache: --token-file or KCACHE_TOKEN)");
  }
  auto client = m_clients.find(sha256(token));
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
  if (who != nullptr) *who = "client '" + client->second.name + "'";
  return {};
}

}  // namespace kcache::server
