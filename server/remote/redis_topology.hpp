// Where a Redis command goes, read strictly and without sockets: the URL that names the nodes,
// a key's cluster hash slot, and what cluster nodes say about slots (CLUSTER SLOTS) and about a
// command sent to the wrong node (MOVED, ASK, TRYAGAIN, CLUSTERDOWN). The Redis client
// (remote/redis.hpp) routes by them; tests and fuzz/redis_reply_fuzzer.cpp call them directly.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/expected.hpp"
#include "remote/redis_reply.hpp"

namespace kcache::server::remote {

struct RedisEndpoint {
  std::string host;
  int port = 0;
};

// HOST:PORT, or [HOST]:PORT for an IPv6 address.
std::string endpoint_name(const RedisEndpoint& endpoint);

struct RedisOptions {
  bool cluster = false;                  // redis-cluster://: seeds are cluster nodes
  std::vector<RedisEndpoint> seeds;      // one for redis://
  std::string user;                      // ACL user ("" with a password: AUTH PASSWORD alone)
  std::string password;                  // from --remote-password-file; empty: no AUTH
  std::chrono::milliseconds connect_timeout{200};    // <= 0: the system's (blocking connect)
  std::chrono::milliseconds operation_timeout{500};  // each wait to write or read; <= 0: none
  int max_redirects = 8;                 // MOVED/ASK/TRYAGAIN/CLUSTERDOWN retries per command
  // The most bytes one reply may hold (its strings and arrays), counted as they arrive, and a bulk
  // string's announced length before its bytes are read. A bigger reply is read no further: it
  // becomes a refused error reply ("kcache: a reply over N bytes"), and its connection is closed,
  // as are the replies pipelined after it.
  std::size_t max_reply_bytes = 512ULL << 20;
  // The most memory all replies of this client may hold at once, counted the same way: a reply's
  // values, and the read buffer that holds its bytes until they are built (so a value counts
  // twice while it is built, as it takes twice its size then). Each reply's first MiB, what a
  // connection's read buffer keeps anyway, is free, so small replies are never refused. A reply
  // that would pass it is refused unread like one over max_reply_bytes. 0: no limit.
  std::size_t max_held_reply_bytes = 0;
};

// Parses "redis://[USER@]HOST:PORT" or "redis-cluster://[USER@]HOST:PORT[,HOST:PORT...]" (HOST
// may be a name, an IPv4 address or a bracketed IPv6 address; PORT 1..65535 is required). A
// password in the URL is refused: it would show in `ps` and in logs. So are other schemes
// (rediss:// needs TLS, which hiredis 0.14 lacks), a path or database number, a query, and a
// seed listed twice. INVALID_ARGUMENT naming what is wrong; the message never repeats the part
// before '@'.
Expected<RedisOptions> parse_redis_url(std::string_view url);

// The hash slots of a Redis Cluster.
inline constexpr int k_slot_count = 16384;

// The cluster hash slot of `key` (0..16383): CRC16-XMODEM of the key, or of the part between the
// first '{' and the next '}' when that part is not empty, as Redis Cluster defines it.
std::uint16_t key_slot(std::string_view key);

// One range of CLUSTER SLOTS: its slots and the address of their primary, then of the replicas.
struct RedisSlotRange {
  std::uint16_t first = 0;
  std::uint16_t last = 0;
  std::vector<RedisEndpoint> nodes;  // [0] the primary
};

// CLUSTER SLOTS's reply. A node whose host is empty or "?" (its address unknown to the node that
// answered) gets `answered_by`'s host. UNAVAILABLE naming what is malformed: not an array, a slot
// outside 0..16383 or first > last, a slot listed twice, a node without host and port, a host
// with characters no address has, a port outside 1..65535. Extra fields (node id, hostname) are
// ignored.
Expected<std::vector<RedisSlotRange>> parse_cluster_slots(const RedisReply& reply, const RedisEndpoint& answered_by);

// A cluster's answer that sends a command elsewhere or asks for it again.
struct RedisRedirect {
  enum class Kind { moved, ask, try_again, cluster_down };
  Kind kind = Kind::moved;
  std::uint16_t slot = 0;  // moved, ask
  RedisEndpoint target;    // moved, ask
};

// The redirect in an error reply's text ("MOVED 3999 127.0.0.1:6381", "ASK ...", "TRYAGAIN ...",
// "CLUSTERDOWN ..."), or nullopt for any other error. An empty or "?" host is `answered_by`'s.
// UNAVAILABLE when a MOVED or ASK cannot be read.
Expected<std::optional<RedisRedirect>> parse_redirect(std::string_view error, const RedisEndpoint& answered_by);

// Text from a URL or a Redis node as the client's messages show it: quoted, at most 64
// characters, anything unprintable as '?'.
std::string quoted(std::string_view text);

}  // namespace kcache::server::remote
