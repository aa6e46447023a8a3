// Fuzzes what a Redis node or an operator hands the Redis client (server/remote/redis.cpp): the
// --remote URL, a redirect error (MOVED/ASK/TRYAGAIN/CLUSTERDOWN), a CLUSTER SLOTS reply, and the
// raw bytes of a connection (RESP through hiredis's reader into RedisReply, under a cap).
// The first byte picks the parser; a CLUSTER SLOTS reply is built from the rest as nested arrays:
// '[' opens one, ']' closes it, '#' starts an integer, '|' ends a string.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "remote/redis.hpp"

namespace {

using kcache::server::remote::RedisReply;

RedisReply build(std::string_view& in, int depth) {
  RedisReply array;
  array.type = RedisReply::Type::array;
  while (!in.empty()) {
    char c = in.front();
    in.remove_prefix(1);
    if (c == ']') return array;
    if (c == '[' && depth < 8) {
      array.elements.push_back(build(in, depth + 1));
      continue;
    }
    RedisReply item;
    if (c == '#') {
      item.type = RedisReply::Type::integer;
      for (int i = 0; i < 6 && !in.empty() && in.front() >= '0' && in.front() <= '9'; ++i) {
        item.integer = item.integer * 10 + (in.front() - '0');
        in.remove_prefix(1);
      }
      if (!in.empty() && in.front() == '-') item.integer = -item.integer;
    } else if (c == '~') {
      item.type = RedisReply::Type::nil;
    } else {
      item.type = RedisReply::Type::string;
      item.str += c;
      while (!in.empty() && in.front() != '|' && in.front() != ']' && in.front() != '[') {
        item.str += in.front();
        in.remove_prefix(1);
      }
      if (!in.empty() && in.front() == '|') in.remove_prefix(1);
    }
    array.elements.push_back(std::move(item));
  }
  return array;
}

// The bytes `r` holds in strings, at every level.
std::size_t string_bytes(const RedisReply& r) {
  std::size_t n = r.str.size();
  for (const RedisReply& e : r.elements) n += string_bytes(e);
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace kcache::server::remote;
  if (size == 0) return 0;
  std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  const RedisEndpoint answered_by{"127.0.0.1", 7000};
  switch (data[0] % 4) {
    case 0: {
      auto options = parse_redis_url(rest);
      if (options && options->seeds.empty()) __builtin_trap();  // a parsed URL names a node
      break;
    }
    case 1: {
      auto redirect = parse_redirect(rest, answered_by);
      if (redirect && *redirect && (*redirect)->slot >= 16384) __builtin_trap();
      break;
    }
    case 2: {
      constexpr std::size_t k_cap = 4096;  // small, so that inputs reach it
      auto read = read_replies(rest, k_cap, 1 + data[0] / 4 % 64);
      for (const RedisReply& r : read.replies) {
        if (string_bytes(r) > k_cap) __builtin_trap();  // no reply outgrows the cap
      }
      break;
    }
    default: {
      RedisReply reply = build(rest, 0);
      auto ranges = parse_cluster_slots(reply, answered_by);
      if (ranges) {
        for (const RedisSlotRange& r : *ranges) {
          if (r.last >= 16384 || r.first > r.last) __builtin_trap();  // only sane ranges come back
        }
      }
    }
  }
  return 0;
}
