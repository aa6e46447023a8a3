// A Redis client for the remote tier: one primary (redis://) or a Redis Cluster
// (redis-cluster://), over hiredis's synchronous API with connect and operation timeouts. For a
// cluster it routes each command by its key's hash slot (CRC16, hash tags), learns the topology
// from CLUSTER SLOTS, follows MOVED (and refreshes the topology) and ASK (ASKING first), and
// retries TRYAGAIN and CLUSTERDOWN with a short backoff. Nothing outside server/remote/ includes
// hiredis: its reader builds each reply straight into RedisReply.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/expected.hpp"

namespace kcache::server::remote {

// The bytes of Redis replies held at once, across every connection and caller of a client: a
// reply takes its bytes as they arrive (before they are read, where their length is announced)
// and gives them back when it is freed. Thread-safe.
class ReplyMemory {
 public:
  explicit ReplyMemory(std::size_t limit) : m_limit(limit) {}
  // Takes `bytes`; false, taking nothing, when that would pass the limit.
  bool take(std::size_t bytes);
  void give_back(std::size_t bytes) { m_held.fetch_sub(bytes, std::memory_order_relaxed); }
  std::size_t held() const { return m_held.load(std::memory_order_relaxed); }
  std::size_t limit() const { return m_limit; }

 private:
  const std::size_t m_limit;
  std::atomic<std::size_t> m_held{0};
};

// What a reply holds of its client's ReplyMemory; given back when the last copy of the reply goes.
class ReplyHold {
 public:
  ReplyHold(std::shared_ptr<ReplyMemory> memory, std::size_t bytes) : m_memory(std::move(memory)), m_bytes(bytes) {}
  ~ReplyHold() { m_memory->give_back(m_bytes); }
  ReplyHold(const ReplyHold&) = delete;
  ReplyHold& operator=(const ReplyHold&) = delete;

 private:
  std::shared_ptr<ReplyMemory> m_memory;
  std::size_t m_bytes;
};

// A reply, as hiredis's reader built it. A Redis error reply (WRONGTYPE, NOSCRIPT...) is a reply of
// type `error`, not a failed Expected: the command reached Redis and was answered.
struct RedisReply {
  enum class Type { nil, string, status, error, integer, array };
  Type type = Type::nil;
  std::string str;  // string, status and error replies
  long long integer = 0;
  std::vector<RedisReply> elements;  // array replies
  // An error reply made by kcache, not Redis: the reply was over RedisOptions::max_reply_bytes or
  // the client's max_held_reply_bytes, and was refused unread (`str` says which).
  bool refused = false;
  // Its bytes' share of the client's ReplyMemory (replies read from Redis, at their root; none for
  // the small ones a connection's kept buffer covers).
  std::shared_ptr<const ReplyHold> hold;

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

// The cluster hash slot of `key` (0..16383): CRC16-XMODEM of the key, or of the part between the
// first '{' and the next '}' when that part is not empty, as Redis Cluster defines it.
std::uint16_t key_slot(std::string_view key);

// What a cluster node says, read strictly (the client's own parsers, declared here for tests).
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

// The replies in `bytes` as a connection's reader builds them (the client's own reader, declared
// here for tests and the fuzzer), fed `chunk` bytes at a time as socket reads would bring them:
// each whole reply, then `error` for what follows if it is malformed ("Protocol error...", "Bad
// bulk string length"...), would hold more than `max_reply_bytes` ("over N bytes"), or would
// take `memory` (if given) past its limit ("replies held at once").
struct ReadReplies {
  std::vector<RedisReply> replies;
  std::optional<std::string> error;
};
ReadReplies read_replies(std::string_view bytes, std::size_t max_reply_bytes, std::size_t chunk = 16384,
                         const std::shared_ptr<ReplyMemory>& memory = nullptr);

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
  // A connection that failed is closed, never reused. UNAUTHENTICATED when a node refuses AUTH
  // (naming the node and the user, never the password); INVALID_ARGUMENT for an empty argv.
  // A command is sent again only where it cannot have run: after a redirect, TRYAGAIN,
  // CLUSTERDOWN, or a node that could not be connected to (then with a backoff from 20 ms,
  // doubling up to 320 ms, each retry counting against max_redirects); a failure once it was
  // sent ends the call. SIGPIPE is held off in the calling thread while it runs.
  Expected<RedisReply> command(std::string_view routing_key, const std::vector<std::string_view>& argv);

  // Several commands to the one node of `routing_key`'s slot, sent together (pipelined) and
  // answered in order; redirects as for command(). A redirect answers one command, not the
  // batch: only the commands redirected are sent again (ASK: each after its own ASKING).
  Expected<std::vector<RedisReply>> pipeline(std::string_view routing_key,
                                             const std::vector<std::vector<std::string_view>>& commands);

  // Forgets the cluster topology (the next command fetches it again) and closes pooled
  // connections. For tests and for the daemon after a burst of errors.
  void reset();

  const RedisOptions& options() const { return m_options; }
  // The bytes its replies hold now (max_held_reply_bytes counts them), and how many replies it
  // refused unread (over max_reply_bytes or max_held_reply_bytes) since it was made.
  std::size_t held_reply_bytes() const;
  std::uint64_t refused_replies() const;

 private:
  struct State;
  RedisOptions m_options;
  std::unique_ptr<State> m_state;
};

}  // namespace kcache::server::remote
