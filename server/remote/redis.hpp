// A Redis client for the remote tier: one primary (redis://) or a Redis Cluster
// (redis-cluster://), over hiredis's synchronous API with connect and operation timeouts. For a
// cluster it routes each command by its key's hash slot (CRC16, hash tags), learns the topology
// from CLUSTER SLOTS, follows MOVED (and refreshes the topology) and ASK (ASKING first), and
// retries TRYAGAIN and CLUSTERDOWN with a short backoff. Nothing outside server/remote/ includes
// hiredis: replies are copied into RedisReply.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/expected.hpp"

namespace kcache::server::remote {

// A reply, copied out of hiredis. A Redis error reply (WRONGTYPE, NOSCRIPT...) is a reply of
// type `error`, not a failed Expected: the command reached Redis and was answered.
struct RedisReply {
  enum class Type { nil, string, status, error, integer, array };
  Type type = Type::nil;
  std::string str;  // string, status and error replies
  long long integer = 0;
  std::vector<RedisReply> elements;  // array replies

  bool is_nil() const { return type == Type::nil; }
  bool is_error() const { return type == Type::error; }
};

struct RedisEndpoint {
  std::string host;
  int port = 0;
};

struct RedisOptions {
  bool cluster = false;                  // redis-cluster://: seeds are cluster nodes
  std::vector<RedisEndpoint> seeds;      // one for redis://
  std::string user;                      // ACL user ("" with a password: AUTH PASSWORD alone)
  std::string password;                  // from --remote-password-file; empty: no AUTH
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds operation_timeout{500};
  int max_redirects = 8;                 // MOVED/ASK/TRYAGAIN/CLUSTERDOWN retries per command
};

// Parses "redis://[USER@]HOST:PORT" or "redis-cluster://HOST:PORT[,HOST:PORT...]" (HOST may be
// a name, an IPv4 address or a bracketed IPv6 address). A password in the URL is refused: it
// would show in `ps` and in logs. INVALID_ARGUMENT naming what is wrong.
Expected<RedisOptions> parse_redis_url(std::string_view url);

// The cluster hash slot of `key` (0..16383): CRC16-XMODEM of the key, or of the part between the
// first '{' and the next '}' when that part is not empty, as Redis Cluster defines it.
std::uint16_t key_slot(std::string_view key);

class Redis {
 public:
  // Connects lazily: construction never fails and never blocks; a command connects (or
  // reconnects) as it needs.
  explicit Redis(RedisOptions options);
  ~Redis();
  Redis(const Redis&) = delete;
  Redis& operator=(const Redis&) = delete;

  // Runs one command on the node that owns `routing_key`'s slot (every key the command names
  // must be in that slot; on a single primary the routing key is ignored). Thread-safe: callers
  // run commands at once, each on a connection of its own from a small per-node pool.
  // UNAVAILABLE (naming the node and what failed) when no node could be reached or answered
  // within the timeouts, or when redirects ran out; DEADLINE_EXCEEDED on an operation timeout.
  // A connection that failed is closed, never reused.
  Expected<RedisReply> command(std::string_view routing_key, const std::vector<std::string_view>& argv);

  // Several commands to the one node of `routing_key`'s slot, sent together (pipelined) and
  // answered in order; redirects as for command().
  Expected<std::vector<RedisReply>> pipeline(std::string_view routing_key,
                                             const std::vector<std::vector<std::string_view>>& commands);

  // Forgets the cluster topology (the next command fetches it again) and closes pooled
  // connections. For tests and for the daemon after a burst of errors.
  void reset();

  const RedisOptions& options() const { return m_options; }

 private:
  struct State;
  RedisOptions m_options;
  std::unique_ptr<State> m_state;
};

}  // namespace kcache::server::remote
