// Reading replies on a hiredis connection, held to the caps (remote/redis_reply.hpp): kcache_redis's
// own header, for the Redis client (redis.cpp); nothing outside kcache_redis includes it. hiredis's
// types are only named here, so that its headers stay in kcache_redis's sources.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "remote/redis_reply.hpp"

struct redisContext;

namespace kcache::server::remote {

// A connection, freed with what its reader holds (cap_replies).
struct ContextFree {
  void operator()(redisContext* c) const;
};
using Context = std::unique_ptr<redisContext, ContextFree>;

// Makes `c`'s reader build RedisReply itself, each reply held to `max_reply_bytes` and all of the
// client's replies to `memory`.
void cap_replies(redisContext& c, std::size_t max_reply_bytes, std::shared_ptr<ReplyMemory> memory);

// hiredis's redisGetReply (write what is buffered, then read until a reply is whole) on a
// connection cap_replies set up, with the reply held to its caps before every read: what it
// built, what waits in the buffer, and a bulk string at its announced length, so that a value over
// a cap is refused before its bytes are read. REDIS_OK or REDIS_ERR, as hiredis's.
int get_reply(redisContext& c, std::unique_ptr<RedisReply>& out);

// Why `c`'s last reply was refused unread ("a reply over N bytes"...), or nullopt when none was.
// A connection that refused a reply is spent: what follows it stays unread.
std::optional<std::string> refusal(const redisContext& c);

}  // namespace kcache::server::remote
