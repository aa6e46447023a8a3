// The remote tier: a Redis (or Redis Cluster) that a fleet of daemons shares. The cache asks it
// after the local store and before compiling (cache/cache.cpp). It reads entries and verifies them
// (entry.hpp), writes local compiles in the background through a bounded queue, and holds the
// leases that make one compile per key across the fleet. Redis being down, slow or failing over
// costs hit rate, never a request: every call has tight timeouts, errors are counted, and a
// circuit breaker keeps a failing Redis out for a growing pause before it is tried again.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kcache/expected.hpp"
#include "remote/entry.hpp"
#include "remote/redis.hpp"

namespace kcache::server::remote {

struct RemoteOptions {
  std::string url;                   // --remote, as given (it holds no password)
  RedisOptions redis;
  bool read_only = false;            // --remote-read-only: never write, never take a lease
  std::uint64_t write_queue_bytes = 256ULL << 20;  // --remote-write-queue-size
  std::uint64_t max_module_bytes = 64ULL << 20;    // --max-module-size: bounds the entries written (largest_entry)
  // --remote-read-budget: what all Redis replies may hold at once (RedisOptions::max_held_reply_bytes);
  // 0: room for one reply of the largest entry (default_read_budget).
  std::uint64_t read_budget_bytes = 0;
  std::chrono::milliseconds lease_ttl{10000};      // --remote-lease-ms; renewed every third of it
  // The circuit breaker opens after this many errors in a row, for a pause that doubles from
  // breaker_pause up to breaker_max_pause while Redis keeps failing.
  int breaker_threshold = 3;
  std::chrono::milliseconds breaker_pause{250};
  std::chrono::milliseconds breaker_max_pause{4000};
};

// The largest entry (its fields' names and values) a daemon with `options` writes to Redis, and
// so the largest it reads; largest_reply adds the reply's framing. See tier.cpp for why.
std::uint64_t largest_entry(const RemoteOptions& options);
std::uint64_t largest_reply(const RemoteOptions& options);
// The read budget when --remote-read-budget is not given: one reply of the largest entry, counted
// twice (as read, then as built).
std::uint64_t default_read_budget(const RemoteOptions& options);

// What a pull from the tier found: the entry (now in the local store), none, or Redis could not
// be asked.
enum class Pull { hit, miss, unavailable };

struct RemoteStats {
  std::uint64_t hits = 0, misses = 0, errors = 0, rejected = 0;
  std::uint64_t refused_replies = 0;  // over the largest entry or the read budget: refused unread
  std::uint64_t writes = 0, write_drops = 0, write_queue_depth = 0, write_queue_bytes = 0;
  std::uint64_t lease_waits = 0, lease_takeovers = 0;
  bool breaker_open = false;
  // Whether Redis answers, for the status page: calls answered since start, failures since the
  // last answer, and the last failure's message.
  std::uint64_t answered = 0;
  int failures_in_row = 0;
  std::string last_error;
};

class RemoteTier {
 public:
  RemoteTier(RemoteOptions options, FleetSecret secret, const Digest& fingerprint);
  ~RemoteTier();  // stops the background threads; what is still queued is lost (see drain)
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  // The verified images of (side, key) in Redis (none: not there). UNAVAILABLE or
  // DEADLINE_EXCEEDED when Redis could not be asked (counted; immediate while the breaker is
  // open). Refused images are counted as rejected and logged; an entry larger than any daemon
  // writes, or one the read budget has no room for now, is refused before it is read (counted in
  // refused_replies) and is none. The caller counts hit or miss.
  Expected<DecodedEntry> read(Side side, const Key& key);

  struct Lease {
    std::string key;
    std::string token;
  };
  // Deletes `lease` (if still ours) in the background, and stops renewing it then.
  void release(Lease lease);

  // Queues (side, key)'s images for Redis, then the release of `lease` if given. A full queue, or
  // an entry over largest_entry, drops the write (counted) and releases the lease at once; never
  // blocks.
  void write(Side side, const Key& key, const EntryRecord& record, std::vector<Image> images,
             std::optional<Lease> lease = std::nullopt);

  // The caller's pull of (side, key): read(), then the entry into its local store.
  using Puller = std::function<Pull()>;
  // A read of a key the local store lacks: `pull` once, counted as a hit or a miss.
  bool read_through(const Puller& pull);

  // The fleet's lease protocol, before a daemon compiles `flight` (which images of (side, key)):
  // the entry another daemon wrote (pulled), or the lease on the compile, or neither (compile
  // without one: Redis is unavailable, the tier is read-only, or the holder did not finish by
  // `deadline`). Waits while another daemon holds the lease; counts hits, misses, waits and
  // takeovers.
  struct Turn {
    bool pulled = false;
    std::optional<Lease> lease;
  };
  Turn await_turn(Side side, const Key& key, const std::string& flight, std::chrono::steady_clock::time_point deadline,
                  const Puller& pull);

  bool read_only() const { return m_options.read_only; }
  const RemoteOptions& options() const { return m_options; }
  RemoteStats stats() const;

  // Waits until the write queue is empty or `deadline` passes (shutdown); returns what is left.
  std::size_t drain(std::chrono::steady_clock::time_point deadline);

 private:
  struct Job {
    std::string entry_key;
    std::vector<Field> fields;     // empty: only a release
    std::optional<Lease> lease;
    std::uint64_t bytes = 0;
  };
  // Runs `call` unless the breaker is open; counts its failure or closes the breaker.
  template <class F>
  auto guarded(F&& call) -> decltype(call());
  bool breaker_allows();
  void breaker_result(bool ok, const Error* error);
  void writer();   // the background writes
  void renewer();  // the background lease renewals
  void release_now(const Lease& lease);
  enum class LeaseState { acquired, held, unavailable };
  // Tries to take the lease on compiling `flight` (which images of (side, key)); a lease taken
  // is renewed in the background until released. `unavailable` for a read-only tier or when
  // Redis cannot be asked.
  LeaseState try_lease(Side side, const Key& key, std::string_view flight, Lease& out);
  // Whether another daemon holds the lease `lease_key`; an error when Redis cannot be asked.
  Expected<bool> lease_held(const std::string& lease_key);

  const RemoteOptions m_options;
  const FleetSecret m_secret;
  const Digest m_fingerprint;
  Redis m_redis;

  std::atomic<std::uint64_t> m_hits{0}, m_misses{0}, m_errors{0}, m_rejected{0}, m_writes{0}, m_drops{0};
  std::atomic<std::uint64_t> m_lease_waits{0}, m_takeovers{0};

  mutable std::mutex m_breaker_mutex;  // guards the breaker state and m_last_error
  int m_failures_in_row = 0;
  std::string m_last_error;
  std::atomic<std::uint64_t> m_answered{0};
  std::chrono::steady_clock::time_point m_closed_at{};  // calls are refused until then
  std::chrono::milliseconds m_pause{0};
  bool m_probing = false;
  std::atomic<bool> m_open{false};

  mutable std::mutex m_queue_mutex;  // guards m_queue, m_queued_bytes, m_stopping, m_writing
  std::condition_variable m_queue_wake, m_queue_idle;
  std::deque<Job> m_queue;
  std::uint64_t m_queued_bytes = 0;
  bool m_writing = false;
  bool m_stopping = false;

  std::mutex m_lease_mutex;  // guards m_leases and m_renewer_stopping
  bool m_renewer_stopping = false;
  std::condition_variable m_lease_wake;
  std::map<std::string, std::string> m_leases;  // held: lease key -> token

  std::thread m_writer, m_renewer;
};

}  // namespace kcache::server::remote
