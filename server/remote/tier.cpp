#include "remote/tier.hpp"

#include <openssl/rand.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <thread>

namespace kcache::server::remote {
namespace {

using Clock = std::chrono::steady_clock;

// Deletes or extends a lease only while it is still the caller's (its token): a lease that
// expired and was taken by another daemon is left alone.
constexpr std::string_view k_release_script =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
constexpr std::string_view k_renew_script =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end";

// What an entry's reply holds beside its fields' bytes: RESP framing, and a RedisReply slot per
// field (an entry has a record and two fields per image: 1 MiB is room for thousands of images).
constexpr std::uint64_t k_reply_overhead = 1 << 20;
// How much larger than the largest module an entry may be (see largest_entry).
constexpr std::uint64_t k_entry_per_module = 4;

// A token no other holder has: host, pid and 16 random bytes.
std::string new_token() {
  std::array<unsigned char, 16> random{};
  RAND_bytes(random.data(), static_cast<int>(random.size()));
  std::array<char, 256> host{};
  gethostname(host.data(), host.size() - 1);
  return std::string(host.data()) + ":" + std::to_string(getpid()) + ":" +
         to_hex(std::string_view(reinterpret_cast<const char*>(random.data()), random.size()));
}

Error reply_error(const RedisReply& reply, std::string_view what) {
  return make_error(ErrorCode::k_unavailable, std::string(what) + ": Redis answered " + reply.str.substr(0, 200));
}

// The client for `options`: no reply may be larger than the largest entry a daemon writes, and all
// replies together hold at most the read budget, so a bigger value is refused on its announced
// length, before its bytes are read.
RedisOptions client_options(const RemoteOptions& options) {
  RedisOptions redis = options.redis;
  redis.max_reply_bytes = largest_reply(options);
  redis.max_held_reply_bytes = options.read_budget_bytes > 0 ? options.read_budget_bytes : default_read_budget(options);
  return redis;
}

}  // namespace

// What bounds an entry: it holds the images of one compile, of modules that together are at most
// --max-module-size (the service refuses larger). Nothing in LLVM bounds an image by its module
// (tests/data/kernels/launch.ll's 2.3 KiB of bitcode makes a 206 KiB cubin: the device runtime
// it links), and a job asks for up to --max-archs archs, each with its images. So the bound is
// kcache's own rule, kept where entries are made: write() does not share an entry over 4x the largest
// module (nor one over the write queue, which could never hold it), so no daemon with this
// --max-module-size writes a larger one and a reader may refuse larger values unread. A job whose
// images pass it is only compiled again by the fleet, never wrong. Every daemon of a fleet should
// have the same --max-module-size (a larger one's biggest entries are misses for the others).
std::uint64_t largest_entry(const RemoteOptions& options) {
  return std::min(options.write_queue_bytes, k_entry_per_module * options.max_module_bytes);
}

std::uint64_t largest_reply(const RemoteOptions& options) { return largest_entry(options) + k_reply_overhead; }

std::uint64_t default_read_budget(const RemoteOptions& options) { return 2 * largest_reply(options); }

RemoteTier::RemoteTier(RemoteOptions options, FleetSecret secret, const Digest& fingerprint)
    : m_options(std::move(options)),
      m_secret(std::move(secret)),
      m_fingerprint(fingerprint),
      m_redis(client_options(m_options)),
      m_pause(m_options.breaker_pause) {
  spdlog::info("remote {}: entries up to {} bytes are shared; Redis replies hold at most {} bytes at once",
               m_options.url, largest_entry(m_options), m_redis.options().max_held_reply_bytes);
  m_writer = std::thread([this] { writer(); });
  m_renewer = std::thread([this] { renewer(); });
}

RemoteTier::~RemoteTier() {
  {
    std::lock_guard lock(m_queue_mutex);
    m_stopping = true;
  }
  m_queue_wake.notify_all();
  {
    std::lock_guard lock(m_lease_mutex);
    m_leases.clear();
    m_renewer_stopping = true;
  }
  m_lease_wake.notify_all();
  m_writer.join();
  m_renewer.join();
}

bool RemoteTier::breaker_allows() {
  std::lock_guard lock(m_breaker_mutex);
  if (!m_open) return true;
  if (Clock::now() < m_closed_at || m_probing) return false;
  m_probing = true;  // one call tries Redis again; the rest wait for its result
  return true;
}

void RemoteTier::breaker_result(bool ok, const Error* error) {
  std::lock_guard lock(m_breaker_mutex);
  bool was_probe = m_probing;
  m_probing = false;
  if (ok) {
    ++m_answered;
    if (m_open) spdlog::info("remote {}: answering again; the circuit breaker is closed", m_options.url);
    m_open = false;
    m_failures_in_row = 0;
    m_pause = m_options.breaker_pause;
    return;
  }
  ++m_errors;
  ++m_failures_in_row;
  if (error != nullptr) m_last_error = error->message.substr(0, 512);
  if (!was_probe && m_failures_in_row < m_options.breaker_threshold) return;
  if (!m_open) {
    spdlog::warn("remote {}: {} errors in a row (last: {}); serving from local alone for {} ms", m_options.url,
                 m_failures_in_row, error != nullptr ? error->message : "?", m_pause.count());
  }
  m_open = true;
  m_closed_at = Clock::now() + m_pause;
  m_pause = std::min(m_pause * 2, m_options.breaker_max_pause);
}

template <class F>
auto RemoteTier::guarded(F&& call) -> decltype(call()) {
  if (!breaker_allows()) {
    return make_error(ErrorCode::k_unavailable, "remote " + m_options.url + " is paused after errors (circuit breaker)");
  }
  auto result = call();
  breaker_result(static_cast<bool>(result), result ? nullptr : &result.error());
  return result;
}

Expected<DecodedEntry> RemoteTier::read(Side side, const Key& key) {
  std::string name = entry_key(side, key);
  auto reply = guarded([&]() -> Expected<RedisReply> { return m_redis.command(name, {"HGETALL", name}); });
  if (!reply) return reply.error();
  if (reply->refused) {  // larger than any entry, or no room in the read budget: counted by the client
    spdlog::debug("remote {}: {} refused unread ({}); treated as a miss", m_options.url, name, reply->str);
    return DecodedEntry{};
  }
  if (reply->type != RedisReply::Type::array) {  // WRONGTYPE
    ++m_rejected;
    spdlog::warn("remote {}: {} is no entry ({}); treated as a miss", m_options.url, name, reply->str.substr(0, 200));
    return DecodedEntry{};
  }
  std::vector<std::string> flat;
  flat.reserve(reply->elements.size());
  for (RedisReply& e : reply->elements) flat.push_back(std::move(e.str));
  DecodedEntry entry = decode_fields(m_secret, side, key, m_fingerprint, std::move(flat));
  for (const std::string& why : entry.rejected) {
    ++m_rejected;
    spdlog::warn("remote {}: refused part of {}: {}", m_options.url, name, why);
  }
  return entry;
}

RemoteTier::LeaseState RemoteTier::try_lease(Side side, const Key& key, std::string_view flight, Lease& out) {
  if (m_options.read_only) return LeaseState::unavailable;
  Lease lease{lease_key(side, key, flight), new_token()};
  std::string ttl = std::to_string(m_options.lease_ttl.count());
  auto reply = guarded([&]() -> Expected<RedisReply> {
    return m_redis.command(lease.key, {"SET", lease.key, lease.token, "NX", "PX", ttl});
  });
  if (!reply) return LeaseState::unavailable;
  if (reply->is_nil()) return LeaseState::held;
  if (reply->type != RedisReply::Type::status) {
    spdlog::warn("remote {}: {}", m_options.url, reply_error(*reply, "taking lease " + lease.key).message);
    return LeaseState::unavailable;
  }
  {
    std::lock_guard lock(m_lease_mutex);
    m_leases[lease.key] = lease.token;
  }
  out = std::move(lease);
  return LeaseState::acquired;
}

Expected<bool> RemoteTier::lease_held(const std::string& lease_key) {
  auto reply = guarded([&]() -> Expected<RedisReply> { return m_redis.command(lease_key, {"EXISTS", lease_key}); });
  if (!reply) return reply.error();
  if (reply->type != RedisReply::Type::integer) return reply_error(*reply, "asking for lease " + lease_key);
  return reply->integer != 0;
}

void RemoteTier::release(Lease lease) {
  std::string tag = lease.key;
  Job job{std::move(tag), {}, std::move(lease), 0};
  {
    std::lock_guard lock(m_queue_mutex);
    m_queue.push_back(std::move(job));  // releases do not count against the byte bound: one per compile
  }
  m_queue_wake.notify_one();
}

bool RemoteTier::read_through(const Puller& pull) {
  Pull pulled = pull();
  if (pulled == Pull::hit) ++m_hits;
  if (pulled == Pull::miss) ++m_misses;
  return pulled == Pull::hit;
}

RemoteTier::Turn RemoteTier::await_turn(Side side, const Key& key, const std::string& flight, Clock::time_point deadline,
                                        const Puller& pull) {
  Turn turn;
  bool waited = false;
  const std::string held_key = lease_key(side, key, flight);
  for (;;) {
    Pull pulled = pull();
    if (pulled == Pull::hit) {
      ++m_hits;
      turn.pulled = true;
      return turn;
    }
    if (pulled == Pull::unavailable) return turn;  // compile there, without Redis
    Lease lease;
    LeaseState state = try_lease(side, key, flight, lease);
    if (state == LeaseState::acquired) {
      // Another daemon may have written the entry and released its lease between the look
      // above and taking the lease: look once more, now that no one else can be compiling.
      if (pull() == Pull::hit) {
        release(std::move(lease));
        ++m_hits;
        turn.pulled = true;
        return turn;
      }
      // Taken after waiting: the holder ended without a result (it died and its lease expired).
      if (waited) ++m_takeovers;
      ++m_misses;
      turn.lease = std::move(lease);
      return turn;
    }
    if (state == LeaseState::unavailable) {
      // A read-only daemon takes no lease, but still waits for one another daemon holds.
      auto held = read_only() ? lease_held(held_key) : Expected<bool>(false);
      if (!held || !*held) {
        ++m_misses;
        return turn;
      }
    }
    if (!waited) ++m_lease_waits;
    waited = true;
    // The holder writes the entry, then releases the lease; a holder that died lets it expire.
    auto pause = std::chrono::milliseconds(2);
    for (;;) {
      if (Clock::now() >= deadline) {
        spdlog::warn("compile key={:.12}: another daemon's lease outlived the job time limit; compiling here", key.hex());
        ++m_misses;
        return turn;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(100));
      auto held = lease_held(held_key);
      if (!held) {
        ++m_misses;
        return turn;
      }
      if (!*held) break;
    }
  }
}

void RemoteTier::release_now(const Lease& lease) {
  {
    std::lock_guard lock(m_lease_mutex);
    m_leases.erase(lease.key);
  }
  auto reply = guarded([&]() -> Expected<RedisReply> {
    return m_redis.command(lease.key, {"EVAL", k_release_script, "1", lease.key, lease.token});
  });
  if (!reply) spdlog::debug("remote {}: lease {} not released ({}); it expires", m_options.url, lease.key, reply.error().message);
}

void RemoteTier::write(Side side, const Key& key, const EntryRecord& record, std::vector<Image> images,
                       std::optional<Lease> lease) {
  if (m_options.read_only) return;
  Job job{entry_key(side, key), encode_fields(m_secret, side, key, m_fingerprint, record, images), std::nullopt, 0};
  for (const Field& f : job.fields) job.bytes += f.first.size() + f.second.size();
  if (job.bytes > largest_entry(m_options)) {
    ++m_drops;
    spdlog::warn("remote {}: the entry of {} holds {} bytes, over the {} a daemon reads (4 x --max-module-size, "
                 "at most --remote-write-queue-size): not shared",
                 m_options.url, key.hex(), job.bytes, largest_entry(m_options));
    if (lease) release(std::move(*lease));
    return;
  }
  bool dropped = false;
  {
    std::lock_guard lock(m_queue_mutex);
    if (m_queued_bytes + job.bytes > m_options.write_queue_bytes) {
      dropped = true;
    } else {
      // The lease is released after the write (and renewed until then): waiters see the entry
      // once the lease is gone.
      job.lease = std::move(lease);
      m_queued_bytes += job.bytes;
      m_queue.push_back(std::move(job));
    }
  }
  if (dropped) {
    ++m_drops;
    spdlog::warn("remote {}: write queue full ({} bytes, --remote-write-queue-size); dropped the write of {}",
                 m_options.url, m_options.write_queue_bytes, key.hex());
    if (lease) release(std::move(*lease));
  }
  m_queue_wake.notify_one();
}

void RemoteTier::writer() {
  std::unique_lock lock(m_queue_mutex);
  for (;;) {
    m_queue_wake.wait(lock, [this] { return m_stopping || !m_queue.empty(); });
    if (m_stopping) return;
    Job job = std::move(m_queue.front());
    m_queue.pop_front();
    m_writing = true;
    lock.unlock();
    if (!job.fields.empty()) {
      std::vector<std::string_view> argv = {"HSET", job.entry_key};
      for (const Field& f : job.fields) {
        argv.push_back(f.first);
        argv.push_back(f.second);
      }
      auto reply = guarded([&]() -> Expected<RedisReply> { return m_redis.command(job.entry_key, argv); });
      if (reply && !reply->is_error()) {
        ++m_writes;
      } else {
        if (reply) breaker_result(false, nullptr);
        // One warning when the breaker opens says Redis is out; each write it refuses is not news.
        spdlog::log(m_open ? spdlog::level::debug : spdlog::level::warn, "remote {}: writing {} failed: {}",
                    m_options.url, job.entry_key, reply ? reply->str.substr(0, 200) : reply.error().message);
      }
    }
    if (job.lease) release_now(*job.lease);
    lock.lock();
    m_queued_bytes -= job.bytes;
    m_writing = false;
    if (m_queue.empty()) m_queue_idle.notify_all();
  }
}

void RemoteTier::renewer() {
  std::unique_lock lock(m_lease_mutex);
  auto every = std::max(m_options.lease_ttl / 3, std::chrono::milliseconds(10));
  std::string ttl = std::to_string(m_options.lease_ttl.count());
  for (;;) {
    m_lease_wake.wait_for(lock, every, [this] { return m_renewer_stopping; });
    if (m_renewer_stopping) return;
    std::map<std::string, std::string> held = m_leases;
    lock.unlock();
    for (const auto& [key, token] : held) {
      auto reply = guarded([&]() -> Expected<RedisReply> {
        return m_redis.command(key, {"EVAL", k_renew_script, "1", key, token, ttl});
      });
      if (reply && reply->type == RedisReply::Type::integer && reply->integer == 0) {
        spdlog::warn("remote {}: lease {} was lost (expired); another daemon may compile the same key", m_options.url, key);
      }
    }
    lock.lock();
  }
}

std::size_t RemoteTier::drain(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(m_queue_mutex);
  m_queue_idle.wait_until(lock, deadline, [this] { return m_queue.empty() && !m_writing; });
  return m_queue.size() + (m_writing ? 1 : 0);
}

RemoteStats RemoteTier::stats() const {
  RemoteStats s;
  s.hits = m_hits;
  s.misses = m_misses;
  s.errors = m_errors;
  s.rejected = m_rejected;
  s.refused_replies = m_redis.refused_replies();
  s.writes = m_writes;
  s.write_drops = m_drops;
  s.lease_waits = m_lease_waits;
  s.lease_takeovers = m_takeovers;
  s.breaker_open = m_open;
  s.answered = m_answered;
  {
    std::lock_guard lock(m_breaker_mutex);
    s.failures_in_row = m_failures_in_row;
    s.last_error = m_last_error;
  }
  std::lock_guard lock(m_queue_mutex);
  s.write_queue_depth = m_queue.size() + (m_writing ? 1 : 0);
  s.write_queue_bytes = m_queued_bytes;
  return s;
}

}  // namespace kcache::server::remote
