// The Redis client's parsers: URLs (strict, never a password), hash slots as Redis Cluster
// computes them, what cluster nodes send (CLUSTER SLOTS, redirects), odd shapes included, and
// the reader that builds replies from RESP under a cap.
#include "remote/redis_reply.hpp"
#include "remote/redis_topology.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace kcache::server::remote {
namespace {

using Type = RedisReply::Type;
using namespace std::string_literals;

TEST(RedisUrl, ReadsOnePrimary) {
  auto plain = parse_redis_url("redis://127.0.0.1:6379");
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_FALSE(plain->cluster);
  ASSERT_EQ(plain->seeds.size(), 1u);
  EXPECT_EQ(plain->seeds[0].host, "127.0.0.1");
  EXPECT_EQ(plain->seeds[0].port, 6379);
  EXPECT_EQ(plain->user, "");

  auto named = parse_redis_url("redis://kcache-rw@cache.example.org:6380");
  ASSERT_TRUE(named) << named.error().message;
  EXPECT_EQ(named->user, "kcache-rw");
  EXPECT_EQ(named->seeds[0].host, "cache.example.org");
  EXPECT_EQ(named->seeds[0].port, 6380);

  auto v6 = parse_redis_url("redis://[::1]:65535");
  ASSERT_TRUE(v6) << v6.error().message;
  EXPECT_EQ(v6->seeds[0].host, "::1");  // without its brackets
  EXPECT_EQ(v6->seeds[0].port, 65535);
}

TEST(RedisUrl, ReadsClusterSeeds) {
  auto url = parse_redis_url("redis-cluster://ops@10.0.0.1:7000,redis-2:7001,[fd00::2]:1");
  ASSERT_TRUE(url) << url.error().message;
  EXPECT_TRUE(url->cluster);
  EXPECT_EQ(url->user, "ops");
  ASSERT_EQ(url->seeds.size(), 3u);
  EXPECT_EQ(url->seeds[0].host, "10.0.0.1");
  EXPECT_EQ(url->seeds[1].host, "redis-2");
  EXPECT_EQ(url->seeds[1].port, 7001);
  EXPECT_EQ(url->seeds[2].host, "fd00::2");
  EXPECT_EQ(url->seeds[2].port, 1);
}

TEST(RedisUrl, RefusesPasswordsWithoutRepeatingThem) {
  for (const char* url : {"redis://kcache:hunter2@h:6379", "redis://:hunter2@h:6379",
                          "redis-cluster://kcache:hunter2@h:1,g:2", "redis://kcache:hunter2@"}) {
    auto r = parse_redis_url(url);
    ASSERT_FALSE(r) << url;
    EXPECT_EQ(r.error().code, ErrorCode::k_invalid_argument);
    EXPECT_NE(r.error().message.find("password"), std::string::npos) << r.error().message;
    EXPECT_EQ(r.error().message.find("hunter2"), std::string::npos) << r.error().message;
  }
}

TEST(RedisUrl, RefusesEachKindOfMistakeSayingWhich) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {"", "empty"},
      {"127.0.0.1:6379", "no scheme"},
      {"http://h:1", "unknown scheme 'http'"},
      {"REDIS://h:1", "unknown scheme"},
      {"rediss://h:1", "TLS"},
      {"redis://", "empty HOST:PORT"},
      {"redis://:6379", "empty host"},
      {"redis://h", "no :PORT"},
      {"redis://h:", "empty port"},
      {"redis://h:0", "out of range"},
      {"redis://h:65536", "out of range"},
      {"redis://h:123456", "out of range"},
      {"redis://h:-1", "not a number"},
      {"redis://h:+1", "not a number"},
      {"redis://h:6379x", "not a number"},
      {"redis://h:63 79", "not a number"},
      {"redis://h:6379/0", "database number"},
      {"redis://h:6379?timeout=1", "query"},
      {"redis://h:6379#x", "fragment"},
      {"redis://a@b@h:1", "more than one '@'"},
      {"redis://@h:1", "empty user"},
      {"redis://us er@h:1", "user name"},
      {"redis://ho st:1", "not a host name"},
      {"redis://h\n:1", "not a host name"},
      {"redis://::1:6379", "brackets"},
      {"redis://[::1:6379", "without ']'"},
      {"redis://[::1]6379", "junk after ']'"},
      {"redis://[::1]", "no :PORT"},
      {"redis://[]:1", "not an IPv6 address"},
      {"redis://[127.0.0.1]:1", "not an IPv6 address"},
      {"redis://h:1,g:2", "redis-cluster://"},
      {"redis-cluster://h:1,", "stray ','"},
      {"redis-cluster://,h:1", "stray ','"},
      {"redis-cluster://h:1,,g:2", "stray ','"},
      {"redis-cluster://h:1,h:1", "listed twice"},
  };
  for (const auto& [url, what] : cases) {
    auto r = parse_redis_url(url);
    ASSERT_FALSE(r) << "accepted " << url;
    EXPECT_EQ(r.error().code, ErrorCode::k_invalid_argument) << url;
    EXPECT_NE(r.error().message.find(what), std::string::npos) << url << ": " << r.error().message;
  }
}

TEST(RedisSlot, IsCrc16XmodemOfTheKey) {
  EXPECT_EQ(key_slot("123456789"), 0x31C3);  // the CRC16-XMODEM check value
  EXPECT_EQ(key_slot("123456789"), 12739);
  EXPECT_EQ(key_slot(""), 0);
  EXPECT_EQ(key_slot(std::string("a\0b", 3)), key_slot(std::string("a\0b", 3)));
  EXPECT_NE(key_slot(std::string("a\0b", 3)), key_slot("a"));  // NUL bytes count
  for (int i = 0; i < 1000; ++i) EXPECT_LT(key_slot("key:" + std::to_string(i)), 16384);
}

TEST(RedisSlot, HashesTheTagAsRedisClusterDefinesIt) {
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("{user1000}.followers"));
  EXPECT_EQ(key_slot("{user1000}.following"), key_slot("user1000"));
  EXPECT_EQ(key_slot("foo{}{bar}"), key_slot("foo{}{bar}"));
  EXPECT_NE(key_slot("foo{}{bar}"), key_slot("bar"));  // an empty first tag: the whole key
  EXPECT_EQ(key_slot("foo{{bar}}zap"), key_slot("{bar"));
  EXPECT_EQ(key_slot("foo{bar}{zap}"), key_slot("bar"));
  EXPECT_EQ(key_slot("foo{bar"), key_slot("foo{bar"));  // no '}': the whole key
  EXPECT_NE(key_slot("foo{bar"), key_slot("bar"));
  EXPECT_EQ(key_slot("}{x}"), key_slot("x"));
}

RedisReply integer(long long v) {
  RedisReply r;
  r.type = Type::integer;
  r.integer = v;
  return r;
}

RedisReply string(std::string s) {
  RedisReply r;
  r.type = Type::string;
  r.str = std::move(s);
  return r;
}

RedisReply array(std::vector<RedisReply> elements) {
  RedisReply r;
  r.type = Type::array;
  r.elements = std::move(elements);
  return r;
}

RedisReply node(std::string host, long long port) {
  return array({string(std::move(host)), integer(port), string("07c37dfeb235213a872192d90877d0cd55635b91"),
                array({string("hostname"), string("redis-1")})});
}

RedisReply range(long long first, long long last, std::vector<RedisReply> nodes) {
  std::vector<RedisReply> e = {integer(first), integer(last)};
  for (auto& n : nodes) e.push_back(std::move(n));
  return array(std::move(e));
}

const RedisEndpoint k_answered_by{"10.1.1.1", 7000};

TEST(RedisClusterSlotsReply, ReadsRangesWithPrimaryFirst) {
  auto reply = array({range(0, 5460, {node("127.0.0.1", 30001), node("127.0.0.1", 30004)}),
                      range(5461, 10922, {node("", 30002)}), range(10923, 16383, {node("?", 30003), node("::1", 1)})});
  auto ranges = parse_cluster_slots(reply, k_answered_by);
  ASSERT_TRUE(ranges) << ranges.error().message;
  ASSERT_EQ(ranges->size(), 3u);
  EXPECT_EQ((*ranges)[0].first, 0);
  EXPECT_EQ((*ranges)[0].last, 5460);
  ASSERT_EQ((*ranges)[0].nodes.size(), 2u);
  EXPECT_EQ((*ranges)[0].nodes[0].port, 30001);
  EXPECT_EQ((*ranges)[0].nodes[1].port, 30004);
  EXPECT_EQ((*ranges)[1].nodes[0].host, "10.1.1.1");  // "": the node that answered
  EXPECT_EQ((*ranges)[2].nodes[0].host, "10.1.1.1");  // "?": likewise
  EXPECT_EQ((*ranges)[2].nodes[1].host, "::1");

  auto bare = parse_cluster_slots(array({range(7, 7, {array({string("h"), integer(1)})})}), k_answered_by);
  ASSERT_TRUE(bare) << bare.error().message;  // [host, port] with no id is enough
  auto none = parse_cluster_slots(array({}), k_answered_by);
  ASSERT_TRUE(none);  // a cluster with no slots assigned yet
  EXPECT_TRUE(none->empty());
}

TEST(RedisClusterSlotsReply, RefusesOddShapesNamingTheNode) {
  RedisReply nil;
  RedisReply error;
  error.type = Type::error;
  error.str = "ERR This instance has cluster support disabled";
  const std::vector<std::pair<RedisReply, const char*>> cases = {
      {nil, "not an array"},
      {error, "not an array"},
      {string("0 16383"), "not an array"},
      {array({nil}), "range 0"},
      {array({integer(3)}), "range 0"},
      {array({range(0, 10, {})}), "range 0"},  // no primary
      {array({range(-1, 10, {node("h", 1)})}), "0..16383"},
      {array({range(0, 16384, {node("h", 1)})}), "0..16383"},
      {array({range(10, 9, {node("h", 1)})}), "first <= last"},
      {array({array({string("0"), integer(10), node("h", 1)})}), "0..16383"},
      {array({range(0, 10, {node("h", 1)}), range(10, 20, {node("g", 2)})}), "slot 10 listed twice"},
      {array({range(0, 10, {nil})}), "not [host, port"},
      {array({range(0, 10, {array({string("h")})})}), "not [host, port"},
      {array({range(0, 10, {array({integer(1), string("h")})})}), "not [host, port"},
      {array({range(0, 10, {array({array({string("h")}), integer(1)})})}), "not [host, port"},
      {array({range(0, 10, {node("h", 1), nil})}), "range 0"},
      {array({range(0, 10, {node("h", 0)})}), "port 0"},
      {array({range(0, 10, {node("h", 65536)})}), "port 65536"},
      {array({range(0, 10, {node("h", 1)}), range(11, 20, {node("bad host", 2)})}), "range 1: host 'bad host'"},
      {array({range(0, 10, {node("h/../x", 1)})}), "host"},
  };
  for (const auto& [reply, what] : cases) {
    auto r = parse_cluster_slots(reply, k_answered_by);
    ASSERT_FALSE(r) << "accepted: " << what;
    EXPECT_EQ(r.error().code, ErrorCode::k_unavailable);
    EXPECT_NE(r.error().message.find("10.1.1.1:7000"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(what), std::string::npos) << r.error().message;
  }
}

TEST(RedisRedirect, ReadsMovedAskTryagainAndClusterdown) {
  struct Case {
    const char* text;
    RedisRedirect::Kind kind;
    std::uint16_t slot;
    const char* host;
    int port;
  };
  for (const Case& c : {Case{"MOVED 3999 127.0.0.1:6381", RedisRedirect::Kind::moved, 3999, "127.0.0.1", 6381},
                        Case{"ASK 16383 ::1:7002", RedisRedirect::Kind::ask, 16383, "::1", 7002},
                        // a host the node does not know: the answering node's
                        Case{"MOVED 0 :7005", RedisRedirect::Kind::moved, 0, "10.1.1.1", 7005},
                        Case{"ASK 0 ?:7005", RedisRedirect::Kind::ask, 0, "10.1.1.1", 7005}}) {
    auto r = parse_redirect(c.text, k_answered_by);
    ASSERT_TRUE(r && *r) << c.text;
    EXPECT_EQ((*r)->kind, c.kind) << c.text;
    EXPECT_EQ((*r)->slot, c.slot) << c.text;
    EXPECT_EQ((*r)->target.host, c.host) << c.text;
    EXPECT_EQ((*r)->target.port, c.port) << c.text;
  }

  auto again = parse_redirect("TRYAGAIN Multiple keys request during rehashing of slot", k_answered_by);
  ASSERT_TRUE(again && *again);
  EXPECT_EQ((*again)->kind, RedisRedirect::Kind::try_again);
  auto down = parse_redirect("CLUSTERDOWN The cluster is down", k_answered_by);
  ASSERT_TRUE(down && *down);
  EXPECT_EQ((*down)->kind, RedisRedirect::Kind::cluster_down);

  for (const char* other : {"WRONGTYPE Operation against a key holding the wrong kind of value", "ERR unknown command",
                            "MOVEDX 1 h:1", "", "NOAUTH Authentication required."}) {
    auto r = parse_redirect(other, k_answered_by);
    ASSERT_TRUE(r) << other;
    EXPECT_FALSE(*r) << other;
  }
}

TEST(RedisRedirect, RefusesMalformedMovedAndAsk) {
  for (const char* bad :
       {"MOVED", "MOVED ", "MOVED 3999", "MOVED 3999 h", "MOVED 3999 h:", "MOVED 3999 h:0", "MOVED 3999 h:70000",
        "MOVED 16384 h:1", "MOVED -1 h:1", "MOVED x h:1", "ASK 1 bad host:1", "ASK 1  h:1", "MOVED 123456 h:1"}) {
    auto r = parse_redirect(bad, k_answered_by);
    ASSERT_FALSE(r) << "accepted " << bad;
    EXPECT_EQ(r.error().code, ErrorCode::k_unavailable);
    EXPECT_NE(r.error().message.find("malformed redirect"), std::string::npos) << r.error().message;
  }
}

}  // namespace
// ---- the reader: RESP as hiredis parses it, built into RedisReply under a cap -------------------

std::string shape(const RedisReply& r) {
  switch (r.type) {
    case RedisReply::Type::nil: return "nil";
    case RedisReply::Type::string: return "'" + r.str + "'";
    case RedisReply::Type::status: return "+" + r.str;
    case RedisReply::Type::error: return "-" + r.str;
    case RedisReply::Type::integer: return std::to_string(r.integer);
    case RedisReply::Type::array: {
      std::string out = "[";
      for (const RedisReply& e : r.elements) out += (out.size() > 1 ? " " : "") + shape(e);
      return out + "]";
    }
  }
  return "?";
}

std::string shapes(const ReadReplies& read) {
  std::string out;
  for (const RedisReply& r : read.replies) out += (out.empty() ? "" : ", ") + shape(r);
  return out;
}

TEST(RedisReader, BuildsEveryReplyTypeWholeOrAByteAtATime) {
  const std::string bytes =
      "+OK\r\n-ERR wrong\r\n:-42\r\n$-1\r\n$5\r\nhe\0lo\r\n*-1\r\n*0\r\n"
      "*3\r\n$1\r\na\r\n*2\r\n:1\r\n$-1\r\n$0\r\n\r\n"s;
  const std::string expected = "+OK, -ERR wrong, -42, nil, 'he\0lo', nil, [], ['a' [1 nil] '']"s;
  for (std::size_t chunk : {std::size_t{1}, std::size_t{3}, std::size_t{16384}}) {
    ReadReplies read = read_replies(bytes, 1 << 20, chunk);
    EXPECT_FALSE(read.error) << *read.error;
    EXPECT_EQ(shapes(read), expected) << "fed " << chunk << " bytes at a time";
  }
  ReadReplies cut = read_replies("+OK\r\n$10\r\nhalf", 1 << 20);
  EXPECT_FALSE(cut.error) << "a reply cut short waits for more";
  EXPECT_EQ(shapes(cut), "+OK");
}

TEST(RedisReader, RefusesWhatRedisNeverSendsAndReadsNoFurther) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"!garbage\r\n+OK\r\n", "Protocol error"},
      {"*-5\r\n", "out of range"},
      {"$12ab\r\nxx\r\n", "Bad bulk string length"},
      {":12x\r\n", "Bad integer value"},
      {"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "nested"},
  };
  for (const auto& [bytes, says] : cases) {
    ReadReplies read = read_replies(bytes, 1 << 20);
    ASSERT_TRUE(read.error) << bytes;
    EXPECT_NE(read.error->find(says), std::string::npos) << bytes << ": " << *read.error;
    EXPECT_TRUE(read.replies.empty()) << bytes;
  }
}

TEST(RedisReader, HoldsEachReplyToTheCapAsItArrives) {
  const std::size_t cap = 1 << 20;
  const std::string part(600 << 10, 'p');  // each under the cap, two together over it
  auto bulk = [](const std::string& s) { return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n"; };
  // A value over the cap is refused before it is whole: only its first MiB or so was buffered.
  ReadReplies one = read_replies("$999999999999\r\n" + std::string(2 << 20, 'z'), cap);
  ASSERT_TRUE(one.error);
  EXPECT_NE(one.error->find("over 1048576 bytes"), std::string::npos) << *one.error;
  ReadReplies two = read_replies("*2\r\n" + bulk(part) + bulk(part), cap);
  ASSERT_TRUE(two.error) << "two values under the cap, together over it";
  ReadReplies slots = read_replies("*1000000000\r\n", cap);
  ASSERT_TRUE(slots.error) << "a billion array slots are refused before they are made";
  EXPECT_NE(slots.error->find("over"), std::string::npos) << *slots.error;
  // The cap is per reply: replies each under it pass one after another.
  ReadReplies each = read_replies(bulk(part) + bulk(part) + "+OK\r\n", cap);
  EXPECT_FALSE(each.error) << *each.error;
  ASSERT_EQ(each.replies.size(), 3u);
  EXPECT_EQ(each.replies[1].str, part);
  // Refused on its announced length: no byte of the value need have arrived.
  ReadReplies announced = read_replies("$1048577\r\n", cap);
  ASSERT_TRUE(announced.error);
  EXPECT_NE(announced.error->find("over 1048576 bytes"), std::string::npos) << *announced.error;
}

TEST(RedisReader, RepliesShareOneBudgetUntilTheyAreFreed) {
  auto bulk = [](std::size_t n) { return "$" + std::to_string(n) + "\r\n" + std::string(n, 'v') + "\r\n"; };
  auto memory = std::make_shared<ReplyMemory>(8 << 20);
  // A 3 MiB value counts twice while it is built (read buffer and string), less the free first MiB.
  ReadReplies first = read_replies(bulk(3 << 20), 64 << 20, 16384, memory);
  ASSERT_FALSE(first.error) << *first.error;
  ASSERT_EQ(first.replies.size(), 1u);
  EXPECT_GE(memory->held(), 2u << 20) << "the reply holds its bytes while it lives";
  EXPECT_LE(memory->held(), 4u << 20) << "the read buffer's share went back with the buffer";
  // Another reply that would pass the budget is refused on its announced length, holding nothing.
  const std::size_t before = memory->held();
  ReadReplies second = read_replies(bulk(4 << 20), 64 << 20, 16384, memory);
  ASSERT_TRUE(second.error);
  EXPECT_NE(second.error->find("replies held at once past 8388608 bytes"), std::string::npos) << *second.error;
  EXPECT_EQ(memory->held(), before);
  // Small replies never wait for room: a connection's first MiB is its own.
  ReadReplies small = read_replies("+OK\r\n" + bulk(64 << 10), 64 << 20, 16384, memory);
  EXPECT_FALSE(small.error) << *small.error;
  EXPECT_EQ(small.replies.size(), 2u);
  first.replies.clear();
  EXPECT_EQ(memory->held(), 0u) << "freed replies give their bytes back";
  ReadReplies again = read_replies(bulk(3 << 20), 64 << 20, 16384, memory);
  EXPECT_FALSE(again.error) << *again.error;
}

}  // namespace kcache::server::remote
