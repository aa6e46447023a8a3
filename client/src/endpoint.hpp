// Where the daemon is and what a client remembers about it, without gRPC: the part of the client
// that the command-line fast path (client/cli/front.cpp) shares with libkcache.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "kcache/expected.hpp"

namespace kcache {

inline constexpr std::string_view k_default_server = "127.0.0.1:7878";

// The daemon address: `flag` when given, else $KCACHE_SERVER, else k_default_server.
std::string resolve_server(std::string_view flag);

// The token for a client: the contents of `token_file` when given, else $KCACHE_TOKEN, else
// empty (trailing whitespace trimmed). FAILED_PRECONDITION when the file cannot be read.
Expected<std::string> resolve_token(const std::string& token_file);

// What a client needs to compute keys and read images without asking the daemon first, as the
// full client last learnt it from GetCapabilities. Kept per server address in
// $KCACHE_STATE_DIR, else $XDG_CACHE_HOME/kcache, else ~/.cache/kcache (servers/ADDRESS). It is
// only a hint: every HTTP answer names the daemon's current fingerprint, and a client that
// computed a key with another one does not use the answer.
struct ServerState {
  std::string fingerprint;  // hex
  std::string host_triple;
  std::uint32_t http_port = 0;  // 0: the daemon serves no HTTP image API
  bool operator==(const ServerState&) const = default;
};

std::optional<ServerState> load_server_state(std::string_view server);
// The folder a client keeps its state in: $KCACHE_STATE_DIR, else $XDG_CACHE_HOME/kcache, else
// ~/.cache/kcache; empty when none of them is set.
std::filesystem::path state_dir();
// Writes atomically (a temporary file renamed); failures are ignored: the state is a cache.
void save_server_state(std::string_view server, const ServerState& state);

// The host part of HOST:PORT ("[::1]:7878" gives "[::1]").
std::string server_host(std::string_view server);

// Why a server address cannot be dialled as written (HOST without its port, a port that is not
// one), for a usage error; nullopt for HOST:PORT, [IPv6]:PORT, unix:PATH or a gRPC target URI.
std::optional<std::string> server_address_problem(std::string_view server);

}  // namespace kcache
