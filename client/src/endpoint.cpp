#include "endpoint.hpp"

#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "input_file.hpp"

namespace kcache {
namespace {

// A token is one line: a file past this is not a token file.
constexpr std::uint64_t k_max_token_file_bytes = 64 << 10;

}  // namespace

std::filesystem::path state_dir() {
  if (const char* d = std::getenv("KCACHE_STATE_DIR"); d != nullptr && *d != '\0') return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d != nullptr && *d != '\0') return std::filesystem::path(d) / "kcache";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return std::filesystem::path(h) / ".cache" / "kcache";
  return {};
}

namespace {

// servers/ADDRESS, with every character but [A-Za-z0-9.-] as '_'.
std::filesystem::path state_file(std::string_view server) {
  std::filesystem::path dir = state_dir();
  if (dir.empty()) return {};
  std::string name(server);
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-') c = '_';
  }
  return dir / "servers" / name;
}

}  // namespace

std::string resolve_server(std::string_view flag) {
  if (!flag.empty()) return std::string(flag);
  if (const char* env = std::getenv("KCACHE_SERVER"); env != nullptr && *env != '\0') return env;
  return std::string(k_default_server);
}

Expected<std::string> resolve_token(const std::string& token_file) {
  std::string token;
  if (!token_file.empty()) {
    auto text = read_input_file(token_file, {k_max_token_file_bytes, "kcache's limit on a token file"});
    if (!text) return make_error(ErrorCode::k_failed_precondition, "the token file: " + text.error().message);
    token = text->substr(0, text->find('\n'));
  } else if (const char* env = std::getenv("KCACHE_TOKEN"); env != nullptr) {
    token = env;
  }
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  return token;
}

std::optional<ServerState> load_server_state(std::string_view server) {
  std::filesystem::path path = state_file(server);
  if (path.empty()) return std::nullopt;
  std::ifstream in(path);
  ServerState s;
  if (!(in >> s.fingerprint >> s.host_triple >> s.http_port) || s.fingerprint.size() != 64) return std::nullopt;
  return s;
}

void save_server_state(std::string_view server, const ServerState& state) {
  std::filesystem::path path = state_file(server);
  if (path.empty() || load_server_state(server) == state) return;
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  std::filesystem::path tmp = path;
  tmp += ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << state.fingerprint << ' ' << state.host_triple << ' ' << state.http_port << '\n';
    if (!out) return;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) std::filesystem::remove(tmp, ec);
}

std::string server_host(std::string_view server) {
  auto colon = server.rfind(':');
  return std::string(colon == std::string_view::npos ? server : server.substr(0, colon));
}

std::optional<std::string> server_address_problem(std::string_view server) {
  if (server.starts_with("unix:") || server.find("://") != std::string_view::npos) return std::nullopt;
  std::string shown = "'" + std::string(server.substr(0, 200)) + "'";
  auto colon = server.rfind(':');
  bool bracketed = server.starts_with('[');
  if (colon == std::string_view::npos || (bracketed && server.rfind(']') > colon) ||
      (!bracketed && server.find(':') != colon)) {
    return "the server address " + shown + " names no port: give HOST:PORT (kcached listens on " +
           std::string(k_default_server.substr(k_default_server.rfind(':') + 1)) + " by default)";
  }
  std::string_view port = server.substr(colon + 1);
  bool digits = !port.empty() && port.size() <= 5 &&
                port.find_first_not_of("0123456789") == std::string_view::npos;
  if (!digits || std::stoi(std::string(port)) == 0 || std::stoi(std::string(port)) > 65535) {
    return "the server address " + shown + " has no port number 1-65535 after its last ':'";
  }
  return std::nullopt;
}

}  // namespace kcache
