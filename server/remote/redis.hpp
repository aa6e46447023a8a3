// A Redis client for the remote tier: one primary (redis://) or a Redis Cluster
// (redis-cluster://), over hiredis's synchronous API with connect and operation timeouts, and a
// small pool of connections per node. For a cluster it routes each command by its key's hash slot
// (remote/redis_topology.hpp), learns the topology from CLUSTER SLOTS, follows MOVED (and refreshes
// the topology) and ASK (ASKING first), and retries TRYAGAIN and CLUSTERDOWN with a short backoff.
// Replies are read under caps (remote/redis_reply.hpp). Nothing outside kcache_redis includes
// hiredis.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/expected.hpp"
#include "remote/redis_reply.hpp"
#include "remote/redis_topology.hpp"

namespace kcache::server::remote {

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
