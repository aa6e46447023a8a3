// Real Redis for tests: one redis-server, or a Redis Cluster of three primaries with a replica
// each, on loopback ports in a test's folder; killed with the test process. Driven with
// redis-server, redis-cli and a few lines of RESP here (no client library), so that the client
// under test is never what sets up or checks its own test.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace kcache::test {

struct RedisServerOptions {
  bool cluster = false;  // --cluster-enabled, nodes.conf in the server's folder
  std::chrono::milliseconds cluster_node_timeout{1000};
  std::string user;            // with `password`: an ACL user with every right; the default user is off
  std::string password;        // alone: requirepass (the default user's password)
  bool debug_command = false;  // DEBUG SLEEP and the like (off by default since Redis 7)
  std::vector<std::string> extra_args;
};

// One redis-server on 127.0.0.1, no persistence, in its own folder.
class RedisServer {
 public:
  // Why Redis tests cannot run here (redis-server, or redis-cli, not installed), or nullopt:
  // for GTEST_SKIP() << *reason.
  static std::optional<std::string> unavailable();

  // Starts redis-server on a free port (whose cluster bus port, +10000, is free too) with its
  // files in `dir`; returns once it answers PING. Throws with its log's tail.
  static std::unique_ptr<RedisServer> start(const std::filesystem::path& dir, RedisServerOptions options = {});
  ~RedisServer();  // kill -9
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  int port() const { return m_port; }
  pid_t pid() const { return m_pid; }
  bool running() const { return m_pid > 0; }
  std::string address() const { return "127.0.0.1:" + std::to_string(m_port); }
  std::string url() const { return "redis://" + address(); }
  const std::filesystem::path& dir() const { return m_dir; }

  // SIGTERM (a clean shutdown), and waits for it.
  void stop();
  // SIGKILL, and waits for it.
  void kill9();
  // Starts it again on the same port with the same folder (a cluster node keeps its identity);
  // returns once it answers PING. Throws if it cannot.
  void restart();

  // The command ARGS on a connection of its own (authenticated as the server's user), its reply
  // as redis-cli prints it (strings and integers as text, an array's elements a line each);
  // throws on an error reply or a connection that fails. Raw RESP, not a redis-cli process per
  // question: a cluster's state is asked about 25 times for each look while it settles.
  std::string query(const std::vector<std::string>& args) const;
  // HSET KEY FIELD VALUE where VALUE is `bytes` bytes of `fill`, written on a loopback connection
  // of its own in 1 MiB pieces, so that this process never holds the value (a stand-in for anyone
  // who can write to Redis planting a huge field). Redis's reply line (":1"); throws when the
  // connection fails. No AUTH: for servers without a password.
  std::string hset_streamed(const std::string& key, const std::string& field, std::size_t bytes, char fill) const;

 private:
  RedisServer(std::filesystem::path dir, RedisServerOptions options)
      : m_dir(std::move(dir)), m_options(std::move(options)) {}
  // Spawns redis-server on m_port; false when the port was taken meanwhile. Throws otherwise.
  bool launch();

  std::filesystem::path m_dir;
  RedisServerOptions m_options;
  int m_port = 0;
  pid_t m_pid = -1;
};

// A Redis Cluster on loopback: three primaries, each with one replica, a short node timeout
// (a killed primary's replica takes over in about two of them).
class RedisCluster {
 public:
  // Like RedisServer::unavailable (a cluster needs redis-cli too).
  static std::optional<std::string> unavailable() { return RedisServer::unavailable(); }

  // Starts six nodes in subfolders of `dir`, joins them as redis-cli --cluster create would (the
  // slots split over the first three, each of the others a replica of one), and returns once
  // every node agrees on the slots and says cluster_state:ok, and every replica is in sync.
  // Throws with what failed.
  // `extra_args`: more redis-server flags for every node.
  static std::unique_ptr<RedisCluster> start(const std::filesystem::path& dir,
                                             std::chrono::milliseconds node_timeout = std::chrono::milliseconds(1000),
                                             std::vector<std::string> extra_args = {});

  // "redis-cluster://127.0.0.1:P1,127.0.0.1:P2": the first `count` nodes.
  std::string seeds(std::size_t count = 2) const;
  const std::vector<std::unique_ptr<RedisServer>>& nodes() const { return m_nodes; }
  RedisServer& node(int port) const;

  // Which port's primary serves each slot (-1: none running), as a running node tells.
  std::vector<int> slot_owners() const;
  // The port of the primary serving `slot`, as a running node tells.
  int primary_of(std::uint16_t slot) const;
  // The ports of the primaries, as a running node tells.
  std::vector<int> primaries() const;
  // kill -9 of the primary serving `slot`; its port.
  int kill9_primary_of(std::uint16_t slot);

  // Waits until every running node says cluster_state:ok and they agree on who serves each
  // slot, and every running replica's link to its primary is up. Throws after `timeout`.
  void wait_until_ok(std::chrono::milliseconds timeout = std::chrono::seconds(20)) const;

  // Moves `count` slots, with their keys, from the primary on `from_port` to the one on `to_port`
  // with redis-cli --cluster reshard, while the cluster serves. Throws if it fails.
  void reshard(int count, int from_port, int to_port) const;

  // One slot by hand, as redis-cli does it: begin (the target IMPORTING, the source MIGRATING:
  // the source answers ASK for keys it no longer has), move its keys (MIGRATE), finish (SETSLOT
  // NODE on the target, the source, then the other primaries).
  void begin_migration(std::uint16_t slot, int from_port, int to_port) const;
  void move_keys(std::uint16_t slot, int from_port, int to_port) const;
  void finish_migration(std::uint16_t slot, int from_port, int to_port) const;

  // How many keys of `slot` the node on `port` holds.
  long long keys_in_slot(int port, std::uint16_t slot) const;

 private:
  RedisCluster() = default;
  // A running node's CLUSTER NODES, as slot -> primary port (-1: no primary) and more.
  struct View {
    std::vector<int> slot_owner;     // 16384 entries
    std::map<int, std::string> ids;  // port -> node id
    std::map<int, bool> primary;     // port -> primary (not failed)
  };
  View view_from(const RedisServer& node) const;
  View view() const;  // from the first running node
  std::string id_of(int port) const;

  std::vector<std::unique_ptr<RedisServer>> m_nodes;
};

}  // namespace kcache::test
