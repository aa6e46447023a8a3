// Redis replies as kcache reads them: hiredis's RESP reader builds each reply straight into
// RedisReply, and holds it to a cap on one reply and to a budget all of a client's replies share,
// so that a hostile value is refused before it is held whole. The reading on a connection is
// remote/redis_reader.hpp (kcache_redis's own); read_replies is the same reader on bytes in memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

}  // namespace kcache::server::remote
