// The Redis client against real redis-server processes: one primary (round trips, binary values,
// pipelines, error replies, AUTH, a server stopped and restarted, timeouts, a peer that closed,
// replies over the cap, peers that answer what Redis never sends),
// and a Redis Cluster of three primaries with a replica each (routing, hash tags, threads, ASK
// and TRYAGAIN during a migration, resharding under load, kill -9 of a primary under load).
// Skipped, saying why, where redis-server is not installed.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "redis_process.hpp"
#include "remote/redis.hpp"

namespace kcache::server::remote {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::RedisServer;
using test::RedisServerOptions;
using ClusterProcesses = test::RedisCluster;

std::chrono::milliseconds since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

RedisOptions options_of(const std::string& url) {
  auto options = parse_redis_url(url);
  if (!options) throw std::runtime_error(options.error().message);
  return *options;
}

// What a reply says, for assertions: "OK", "value", "(nil)", "(error) ...", "(integer) 3".
std::string text(const Expected<RedisReply>& r) {
  if (!r) return "(failed) " + r.error().message;
  switch (r->type) {
    case RedisReply::Type::nil:
      return "(nil)";
    case RedisReply::Type::error:
      return "(error) " + r->str;
    case RedisReply::Type::integer:
      return "(integer) " + std::to_string(r->integer);
    case RedisReply::Type::array:
      return "(array of " + std::to_string(r->elements.size()) + ")";
    default:
      return r->str;
  }
}

// A loopback listener on a port of the kernel's choosing.
struct Listener {
  explicit Listener(int backlog) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof a;
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), size) != 0 || listen(fd, backlog) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &size) != 0) {
      throw std::runtime_error("cannot listen on loopback");
    }
    port = ntohs(a.sin_port);
  }
  ~Listener() { close(fd); }
  int fd = -1;
  int port = 0;
};

int connect_to(int port, bool blocking) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (blocking ? 0 : SOCK_NONBLOCK), 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  return fd;
}

// A test's folder (each server's redis.log), kept and named when the test fails.
class RedisTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (auto reason = RedisServer::unavailable()) GTEST_SKIP() << *reason;
  }
  void TearDown() override {
    if (!HasFailure() && std::getenv("KCACHE_KEEP_TEST_DIRS") == nullptr) return;
    m_dir.keep();
    std::fprintf(stderr, "kept %s (redis.log of each server)\n", m_dir.path().c_str());
  }
  test::TempDir m_dir;
};

// ---- one primary ------------------------------------------------------------------------------

class RedisSingle : public RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    if (IsSkipped()) return;
    RedisServerOptions options;
    options.debug_command = true;
    m_server = RedisServer::start(m_dir.path() / "redis", options);
    m_redis = std::make_unique<Redis>(options_of(m_server->url()));
  }
  std::unique_ptr<RedisServer> m_server;
  std::unique_ptr<Redis> m_redis;
};

TEST_F(RedisSingle, RoundTripsStringsAndHashes) {
  EXPECT_EQ(text(m_redis->command("ignored", {"SET", "greeting", "hello"})), "OK");
  auto got = m_redis->command("", {"GET", "greeting"});
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(got->type, RedisReply::Type::string);
  EXPECT_EQ(got->str, "hello");
  auto missing = m_redis->command("", {"GET", "no such key"});
  ASSERT_TRUE(missing);
  EXPECT_TRUE(missing->is_nil());

  EXPECT_EQ(text(m_redis->command("", {"HSET", "h", "f1", "v1", "f2", "v2"})), "(integer) 2");
  auto all = m_redis->command("", {"HGETALL", "h"});
  ASSERT_TRUE(all) << all.error().message;
  ASSERT_EQ(all->type, RedisReply::Type::array);
  ASSERT_EQ(all->elements.size(), 4u);
  std::map<std::string, std::string> fields;
  for (std::size_t i = 0; i + 1 < all->elements.size(); i += 2) fields[all->elements[i].str] = all->elements[i + 1].str;
  EXPECT_EQ(fields, (std::map<std::string, std::string>{{"f1", "v1"}, {"f2", "v2"}}));
}

TEST_F(RedisSingle, ValuesAndKeysAreBinarySafe) {
  const std::string key("k\0ey\r\n", 6);
  const std::string small("\0a\0\r\n$3\r\n*1\r\n", 14);
  std::string large(1 << 20, '\0');
  for (std::size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>((i * 7919) >> 3);
  for (const std::string* value : {&small, static_cast<const std::string*>(&large)}) {
    EXPECT_EQ(text(m_redis->command("", {"SET", key, *value})), "OK");
    auto got = m_redis->command("", {"GET", key});
    ASSERT_TRUE(got) << got.error().message;
    EXPECT_EQ(got->str.size(), value->size());
    EXPECT_TRUE(got->str == *value);
  }
  EXPECT_EQ(text(m_redis->command("", {"STRLEN", key})), "(integer) " + std::to_string(large.size()));
}

TEST_F(RedisSingle, PipelineAnswersInOrder) {
  std::vector<std::vector<std::string_view>> commands = {{"DEL", "n"}};
  for (int i = 0; i < 100; ++i) commands.push_back({"INCR", "n"});
  commands.push_back({"GET", "n"});
  auto replies = m_redis->pipeline("", commands);
  ASSERT_TRUE(replies) << replies.error().message;
  ASSERT_EQ(replies->size(), commands.size());
  for (int i = 1; i <= 100; ++i) EXPECT_EQ((*replies)[i].integer, i);
  EXPECT_EQ(replies->back().str, "100");
  auto none = m_redis->pipeline("", {});
  ASSERT_TRUE(none);
  EXPECT_TRUE(none->empty());
}

TEST_F(RedisSingle, AnErrorReplyIsAnAnswerNotAFailure) {
  EXPECT_EQ(text(m_redis->command("", {"SET", "k", "v"})), "OK");
  auto wrong = m_redis->command("", {"LPUSH", "k", "x"});
  ASSERT_TRUE(wrong) << wrong.error().message;
  EXPECT_TRUE(wrong->is_error());
  EXPECT_TRUE(wrong->str.starts_with("WRONGTYPE")) << wrong->str;
  auto unknown = m_redis->command("", {"NO-SUCH-COMMAND"});
  ASSERT_TRUE(unknown);
  EXPECT_TRUE(unknown->is_error());
  EXPECT_EQ(text(m_redis->command("", {"GET", "k"})), "v");  // the connection carries on

  auto empty = m_redis->command("", {});
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, ErrorCode::k_invalid_argument);
}

TEST_F(RedisSingle, ThreadsShareOneClient) {
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        std::string key = "t" + std::to_string(t) + ":" + std::to_string(i);
        if (text(m_redis->command(key, {"SET", key, key + "!"})) != "OK" ||
            text(m_redis->command(key, {"GET", key})) != key + "!") {
          ++failures;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
}

TEST_F(RedisSingle, AStoppedServerIsUnavailableAtOnceAndTheClientRecoversAfterItsRestart) {
  ASSERT_EQ(text(m_redis->command("", {"SET", "k", "v"})), "OK");
  m_server->stop();
  for (int i = 0; i < 2; ++i) {  // a dead pooled connection, then a refused one
    auto start = Clock::now();
    auto r = m_redis->command("", {"GET", "k"});
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::k_unavailable) << r.error().message;
    EXPECT_NE(r.error().message.find(m_server->address()), std::string::npos) << r.error().message;
    EXPECT_LT(since(start), 2s);
  }
  m_server->restart();
  EXPECT_EQ(text(m_redis->command("", {"SET", "k", "back"})), "OK");

  // Restarted while the client's connection sat idle: the first command after it still works,
  // since a pooled connection the server closed is seen before it is used.
  m_server->stop();
  m_server->restart();
  EXPECT_EQ(text(m_redis->command("", {"GET", "k"})), "(nil)");  // no persistence
}

TEST_F(RedisSingle, AnOperationTimeoutIsDeadlineExceededAndItsConnectionIsNotReused) {
  RedisOptions options = options_of(m_server->url());
  options.operation_timeout = 200ms;
  Redis redis(options);
  ASSERT_EQ(text(redis.command("", {"PING"})), "PONG");
  auto start = Clock::now();
  auto slept = redis.command("", {"DEBUG", "SLEEP", "1"});
  auto took = since(start);
  ASSERT_FALSE(slept) << text(slept);
  EXPECT_EQ(slept.error().code, ErrorCode::k_deadline_exceeded) << slept.error().message;
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 950ms);
  // Once the server wakes: PONG, not the late +OK of DEBUG SLEEP on a reused connection.
  std::string pong;
  for (auto deadline = Clock::now() + 10s; Clock::now() < deadline && pong != "PONG";)
    pong = text(redis.command("", {"PING"}));
  EXPECT_EQ(pong, "PONG");
}

TEST_F(RedisSingle, ANodeThatNeverAcceptsIsUnavailableWithinTheConnectTimeout) {
  Listener full(0);
  // Fill its accept queue (backlog 0 holds one): the kernel then drops the client's SYN.
  int queued = connect_to(full.port, true);
  int waiting = connect_to(full.port, false);
  RedisOptions options;
  options.seeds = {{"127.0.0.1", full.port}};
  options.connect_timeout = 200ms;
  options.operation_timeout = 200ms;
  Redis redis(options);
  auto start = Clock::now();
  auto r = redis.command("", {"PING"});
  auto took = since(start);
  close(queued);
  close(waiting);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::k_unavailable) << r.error().message;
  EXPECT_NE(r.error().message.find("127.0.0.1:" + std::to_string(full.port)), std::string::npos) << r.error().message;
  EXPECT_LT(took, 2s);
}

TEST_F(RedisSingle, WritingToAPeerThatClosedIsUnavailableAndRaisesNoSigpipe) {
  // A peer that answers AUTH and closes at once (its +OK and FIN in one segment): the client's
  // next writes meet a reset, and the second of them raises SIGPIPE, which would end this
  // process were it not held off.
  Listener listener(4);
  const std::string auth = "*2\r\n$4\r\nAUTH\r\n$1\r\np\r\n";
  std::thread peer([&] {
    int fd = accept(listener.fd, nullptr, nullptr);
    std::string got(auth.size(), '\0');
    for (std::size_t n = 0; n < got.size();) {
      ssize_t r = recv(fd, got.data() + n, got.size() - n, 0);
      if (r <= 0) break;
      n += static_cast<std::size_t>(r);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one);
    send(fd, "+OK\r\n", 5, MSG_NOSIGNAL);
    close(fd);
  });
  RedisOptions options;
  options.seeds = {{"127.0.0.1", listener.port}};
  options.password = "p";
  Redis redis(options);
  const std::string mib(1 << 20, 'x');
  std::vector<std::vector<std::string_view>> commands(32, {"SET", "k", mib});  // more than socket buffers hold
  auto r = redis.pipeline("", commands);
  peer.join();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::k_unavailable) << r.error().message;
  sigset_t blocked, pending;
  pthread_sigmask(SIG_BLOCK, nullptr, &blocked);
  sigpending(&pending);
  EXPECT_FALSE(sigismember(&blocked, SIGPIPE)) << "the thread's signal mask is left as it was";
  EXPECT_FALSE(sigismember(&pending, SIGPIPE)) << "no SIGPIPE left pending";
}

TEST_F(RedisSingle, AReplyOverTheCapIsRefusedUnreadAndTheClientGoesOn) {
  RedisOptions patient = options_of(m_server->url());
  patient.operation_timeout = 30s;  // megabytes on a busy machine (under ASan, say)
  Redis writer(patient);
  const std::string big(3 << 20, 'b');
  ASSERT_EQ(text(writer.command("big", {"SET", "big", big})), "OK");
  std::vector<std::string_view> hset = {"HSET", "wide"};
  const std::string field_value(64 << 10, 'w');
  std::vector<std::string> names;
  for (int i = 0; i < 40; ++i) names.push_back("f" + std::to_string(i));  // 40 x 64 KiB: 2.5 MiB in all
  for (const std::string& name : names) {
    hset.push_back(name);
    hset.push_back(field_value);
  }
  ASSERT_EQ(text(writer.command("wide", hset)), "(integer) 40");

  RedisOptions options = patient;
  options.max_reply_bytes = 1 << 20;
  Redis capped(options);
  // One value over the cap, and an array whose values are each under it but together over.
  for (std::vector<std::string_view> command : {std::vector<std::string_view>{"GET", "big"},
                                                 std::vector<std::string_view>{"HGETALL", "wide"}}) {
    auto r = capped.command(command[1], command);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(text(r), "(error) kcache: a reply over 1048576 bytes, refused unread") << command[0];
    EXPECT_EQ(text(capped.command("", {"PING"})), "PONG") << "a fresh connection after " << command[0];
  }
  // A pipeline: the replies after the refused one are refused too (they were never read).
  auto replies = capped.pipeline("", {{"PING"}, {"GET", "big"}, {"PING"}});
  ASSERT_TRUE(replies) << replies.error().message;
  ASSERT_EQ(replies->size(), 3u);
  EXPECT_EQ((*replies)[0].str, "PONG");
  EXPECT_TRUE((*replies)[1].is_error());
  EXPECT_TRUE((*replies)[2].is_error());
  EXPECT_EQ(text(capped.command("", {"GET", "missing"})), "(nil)");
  auto whole = writer.command("big", {"GET", "big"});
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->str.size(), big.size()) << "the default cap takes it";
}

// Replies on every connection of a client share one budget (RedisOptions::max_held_reply_bytes):
// a reply holds its bytes until it is freed, one that would pass the budget is refused on its
// announced length (counted), and small replies always find room.
TEST_F(RedisSingle, RepliesOnAllConnectionsShareOneBudget) {
  RedisOptions patient = options_of(m_server->url());
  patient.operation_timeout = 30s;
  Redis writer(patient);
  const std::string value(6 << 20, 'v');
  ASSERT_EQ(text(writer.command("six", {"SET", "six", value})), "OK");

  RedisOptions options = patient;
  options.max_held_reply_bytes = 16 << 20;  // one 6 MiB value as read and as built, not two
  Redis client(options);
  auto first = client.command("six", {"GET", "six"});
  ASSERT_TRUE(first) << first.error().message;
  ASSERT_EQ(first->str.size(), value.size());
  EXPECT_GE(client.held_reply_bytes(), 5u << 20) << "the reply holds its bytes while it lives";
  std::optional<Expected<RedisReply>> second;
  std::thread([&] { second = client.command("six", {"GET", "six"}); }).join();  // another thread and connection
  ASSERT_TRUE(second && *second) << (second && !*second ? (*second).error().message : "");
  EXPECT_TRUE((*second)->refused) << text(*second);
  EXPECT_NE((*second)->str.find("replies held at once past 16777216 bytes"), std::string::npos) << text(*second);
  EXPECT_EQ(client.refused_replies(), 1u);
  EXPECT_EQ(text(client.command("", {"PING"})), "PONG") << "small replies find room";
  first = RedisReply{};
  EXPECT_EQ(client.held_reply_bytes(), 0u);
  auto third = client.command("six", {"GET", "six"});
  ASSERT_TRUE(third) << third.error().message;
  EXPECT_EQ(third->str.size(), value.size()) << "room again once the first reply was freed";
}

// A peer that is no Redis, answering each connection's first command with `answer` (and then
// as many bytes of filler as `filler`), then closing.
class FakePeer {
 public:
  FakePeer(std::string answer, std::size_t filler) : m_listener(8) {
    m_thread = std::thread([this, answer = std::move(answer), filler] {
      for (;;) {
        int fd = accept(m_listener.fd, nullptr, nullptr);
        if (fd < 0 || m_stop) {
          if (fd >= 0) close(fd);
          return;
        }
        char buffer[4096];
        if (recv(fd, buffer, sizeof buffer, 0) > 0) {
          send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
          const std::string chunk(1 << 16, 'z');
          for (std::size_t sent = 0; sent < filler;) {
            ssize_t n = send(fd, chunk.data(), std::min(chunk.size(), filler - sent), MSG_NOSIGNAL);
            if (n <= 0) break;
            sent += static_cast<std::size_t>(n);
          }
        }
        close(fd);
      }
    });
  }
  ~FakePeer() {
    m_stop = true;
    close(connect_to(m_listener.port, true));  // wakes accept()
    m_thread.join();
  }
  int port() const { return m_listener.port; }

 private:
  Listener m_listener;
  std::atomic<bool> m_stop{false};
  std::thread m_thread;
};

TEST_F(RedisSingle, AnswersThatAreNotRedisProtocolAreErrorsNeverCrashes) {
  struct Case {
    const char* what;
    std::string answer;
    std::size_t filler;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"a reply type no Redis sends", "!garbage\r\n", 0, "Protocol error"},
      {"an array of -5 elements", "*-5\r\n", 0, "out of range"},
      {"a bulk length that is no number", "$12ab\r\nxx\r\n", 0, "Bad bulk string length"},
      {"a reply cut short", "$100\r\nshort", 0, "closed"},
      {"an endless bulk string", "$999999999999\r\n", 64 << 20, "over 1048576 bytes"},
      {"an array of a billion elements", "*1000000000\r\n", 0, "over 1048576 bytes"},
  };
  for (const Case& c : cases) {
    FakePeer peer(c.answer, c.filler);
    RedisOptions options;
    options.seeds = {{"127.0.0.1", peer.port()}};
    options.operation_timeout = 2s;
    options.max_reply_bytes = 1 << 20;
    Redis redis(options);
    auto r = redis.command("", {"GET", "k"});
    if (r) {
      EXPECT_TRUE(r->is_error()) << c.what << ": " << text(r);
      EXPECT_NE(r->str.find(c.says), std::string::npos) << c.what << ": " << text(r);
    } else {
      EXPECT_EQ(r.error().code, ErrorCode::k_unavailable) << c.what << ": " << r.error().message;
      EXPECT_NE(r.error().message.find(c.says), std::string::npos) << c.what << ": " << r.error().message;
    }
  }
  EXPECT_EQ(text(m_redis->command("", {"PING"})), "PONG");
}

TEST_F(RedisSingle, AClusterUrlForAServerWithoutClusterSupportSaysSo) {
  Redis redis(options_of("redis-cluster://" + m_server->address()));
  auto start = Clock::now();
  auto r = redis.command("k", {"GET", "k"});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::k_unavailable);
  EXPECT_NE(r.error().message.find("cluster support disabled"), std::string::npos) << r.error().message;
  EXPECT_LT(since(start), 1s) << "a node that answers is not waited for";
}

// ---- AUTH -------------------------------------------------------------------------------------

using RedisAuth = RedisTest;

TEST_F(RedisAuth, AnAclUserWithTheRightPasswordGetsInAndAWrongOneIsNamedNotShown) {
  RedisServerOptions server_options;
  server_options.user = "kcache";
  server_options.password = "right-pass";
  auto server = RedisServer::start(m_dir.path() / "redis", server_options);
  RedisOptions options = options_of("redis://kcache@" + server->address());

  options.password = "right-pass";
  Redis good(options);
  EXPECT_EQ(text(good.command("", {"SET", "k", "v"})), "OK");
  EXPECT_EQ(text(good.command("", {"ACL", "WHOAMI"})), "kcache");

  options.password = "wrong-pass";
  Redis bad(options);
  auto refused = bad.command("", {"GET", "k"});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::k_unauthenticated);
  EXPECT_NE(refused.error().message.find(server->address()), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("kcache"), std::string::npos) << refused.error().message;
  EXPECT_EQ(refused.error().message.find("wrong-pass"), std::string::npos) << refused.error().message;

  options.password.clear();  // no AUTH: Redis answers, with NOAUTH
  Redis anonymous(options);
  auto noauth = anonymous.command("", {"GET", "k"});
  ASSERT_TRUE(noauth) << noauth.error().message;
  EXPECT_TRUE(noauth->is_error());
  EXPECT_TRUE(noauth->str.starts_with("NOAUTH")) << noauth->str;
}

TEST_F(RedisAuth, APasswordAloneAuthenticatesTheDefaultUser) {
  RedisServerOptions server_options;
  server_options.password = "only-pass";
  auto server = RedisServer::start(m_dir.path() / "redis", server_options);
  RedisOptions options = options_of(server->url());
  options.password = "only-pass";
  EXPECT_EQ(text(Redis(options).command("", {"ACL", "WHOAMI"})), "default");
  options.password = "not-it";
  auto refused = Redis(options).command("", {"PING"});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::k_unauthenticated);
  EXPECT_EQ(refused.error().message.find("not-it"), std::string::npos) << refused.error().message;
}

// ---- a cluster --------------------------------------------------------------------------------

// Threads that each SET and GET keys of their own until stopped, noting what failed and when.
class Load {
 public:
  Load(Redis& redis, int threads, std::string prefix) : m_redis(redis), m_prefix(std::move(prefix)) {
    for (int t = 0; t < threads; ++t) m_threads.emplace_back([this, t] { run(t); });
  }
  ~Load() { stop(); }

  void stop() {
    m_stop = true;
    for (auto& t : m_threads) {
      if (t.joinable()) t.join();
    }
  }

  // A SET and a GET of what it wrote.
  struct Op {
    Clock::time_point start;
    std::string key;
    std::string value;
    bool ok = false;
    std::string what;  // a failure's replies
  };
  // After stop(): every operation.
  const std::vector<Op>& ops() const { return m_ops; }

  // The keys that read back well, with their values, of the operations started at or after `from`.
  std::map<std::string, std::string> written_since(Clock::time_point from) const {
    std::map<std::string, std::string> written;
    for (const Op& op : m_ops) {
      if (op.ok && op.start >= from) written[op.key] = op.value;
    }
    return written;
  }

  // How many operations started at or after `from` failed, the first few of them named.
  std::pair<int, std::string> failures_since(Clock::time_point from) const {
    int count = 0;
    std::string named;
    for (const Op& op : m_ops) {
      if (op.ok || op.start < from) continue;
      if (++count <= 3) named += "\n  " + op.key + ": " + op.what;
    }
    return {count, named};
  }

 private:
  void run(int thread) {
    std::vector<Op> ops;
    for (int i = 0; !m_stop; ++i) {
      Op op;
      op.start = Clock::now();
      op.key = m_prefix + ":" + std::to_string(thread) + ":" + std::to_string(i);
      op.value = "value " + std::to_string(i);
      std::string set = text(m_redis.command(op.key, {"SET", op.key, op.value}));
      std::string got = set == "OK" ? text(m_redis.command(op.key, {"GET", op.key})) : "";
      op.ok = set == "OK" && got == op.value;
      if (!op.ok) op.what = "SET gave " + set + "; GET gave " + got;
      ops.push_back(std::move(op));
    }
    std::lock_guard lock(m_ops_mutex);
    m_ops.insert(m_ops.end(), ops.begin(), ops.end());
  }

  Redis& m_redis;
  const std::string m_prefix;
  std::atomic<bool> m_stop{false};
  std::vector<std::thread> m_threads;
  std::mutex m_ops_mutex;  // guards m_ops as threads finish
  std::vector<Op> m_ops;
};

class RedisCluster : public RedisTest {
 protected:
  void SetUp() override {
    RedisTest::SetUp();
    if (IsSkipped()) return;
    m_cluster = ClusterProcesses::start(m_dir.path(), 1000ms, cluster_args());
    m_redis = std::make_unique<Redis>(options_of(m_cluster->seeds()));
  }
  // More redis-server flags for every node.
  virtual std::vector<std::string> cluster_args() const { return {}; }

  // kill -9 of the primary of "victim"'s slot while four threads SET and GET: the client finds
  // the replica that takes over by itself (no reset()) within 15 s, operations started after it
  // did never fail, and what they and the test wrote from then on reads back (what reached the
  // dead primary just before it died may be lost: replication is asynchronous). With
  // `others_keep_serving`, no operation on another primary's slots fails at all.
  void expect_recovery_from_kill9(bool others_keep_serving) {
    const auto owners = m_cluster->slot_owners();
    Load load(*m_redis, 4, "load");
    const std::uint16_t slot = key_slot("victim");
    const int killed = m_cluster->kill9_primary_of(slot);
    const auto killed_at = Clock::now();
    std::string last;
    while (since(killed_at) < 15s && last != "OK") last = text(m_redis->command("victim", {"SET", "victim", "after"}));
    ASSERT_EQ(last, "OK") << "15 s after the kill";
    const auto recovered_at = Clock::now();
    std::fprintf(stderr, "writes to slot %d succeeded again %lld ms after kill -9 of its primary\n", slot,
                 static_cast<long long>(since(killed_at).count()));
    m_cluster->wait_until_ok();
    EXPECT_NE(m_cluster->primary_of(slot), killed);

    std::map<std::string, std::string> after;  // over all slots, the new primary's among them
    for (int i = 0; i < 300; ++i) {
      std::string key = "after:" + std::to_string(i);
      ASSERT_EQ(text(m_redis->command(key, {"SET", key, key})), "OK") << key;
      after[key] = key;
    }
    expect_read_back(after);
    EXPECT_EQ(text(m_redis->command("victim", {"GET", "victim"})), "after");
    load.stop();
    auto [failed, which] = load.failures_since(recovered_at);
    EXPECT_EQ(failed, 0) << "operations that failed once the client had recovered:" << which;
    auto written = load.written_since(recovered_at);
    EXPECT_FALSE(written.empty());
    expect_read_back(written);
    if (!others_keep_serving) return;
    int failed_elsewhere = 0;
    for (const Load::Op& op : load.ops()) {
      if (!op.ok && owners[key_slot(op.key)] != killed && ++failed_elsewhere <= 3) {
        ADD_FAILURE() << "on a primary that did not die: " << op.key << ": " << op.what;
      }
    }
    EXPECT_EQ(failed_elsewhere, 0) << "of " << load.ops().size();
  }

  // Every key of `written` reads back with its value through the client.
  void expect_read_back(const std::map<std::string, std::string>& written) {
    int wrong = 0;
    for (const auto& [key, value] : written) {
      std::string got = text(m_redis->command(key, {"GET", key}));
      if (got != value && ++wrong <= 3) ADD_FAILURE() << key << ": " << got << " instead of " << value;
    }
    EXPECT_EQ(wrong, 0) << "of " << written.size() << " keys";
  }

  std::unique_ptr<ClusterProcesses> m_cluster;
  std::unique_ptr<Redis> m_redis;
};

TEST_F(RedisCluster, KeysSpreadOverEveryPrimaryAndReadBackFromAnySeedThatAnswers) {
  int closed_port = Listener(1).port;  // nothing listens there once it is closed
  auto redis = Redis(options_of("redis-cluster://127.0.0.1:" + std::to_string(closed_port) + "," +
                                m_cluster->nodes()[4]->address()));  // a dead seed, then a replica
  std::map<std::string, std::string> written;
  for (int i = 0; i < 300; ++i) {
    std::string key = "key:" + std::to_string(i);
    ASSERT_EQ(text(redis.command(key, {"SET", key, "v" + std::to_string(i)})), "OK") << key;
    written[key] = "v" + std::to_string(i);
  }
  long long total = 0;
  for (int port : m_cluster->primaries()) {
    long long keys = std::stoll(m_cluster->node(port).query({"DBSIZE"}));
    EXPECT_GT(keys, 0) << "primary " << port << " got no key";
    total += keys;
  }
  EXPECT_EQ(total, 300);
  expect_read_back(written);
  // The slot of a key is the one Redis computes.
  for (const std::string key : {"key:1", "key:299", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "x"}) {
    EXPECT_EQ(std::to_string(key_slot(key)), m_cluster->nodes()[0]->query({"CLUSTER", "KEYSLOT", key})) << key;
  }
}

TEST_F(RedisCluster, HashTaggedKeysShareOneSlotSoOneCallMayNameThemAll) {
  const std::uint16_t slot = key_slot("{user1000}.following");
  ASSERT_EQ(slot, key_slot("{user1000}.followers"));
  EXPECT_EQ(text(m_redis->command("{user1000}", {"MSET", "{user1000}.following", "a", "{user1000}.followers", "b"})),
            "OK");
  auto both = m_redis->command("{user1000}.followers", {"MGET", "{user1000}.following", "{user1000}.followers"});
  ASSERT_TRUE(both) << both.error().message;
  ASSERT_EQ(both->elements.size(), 2u);
  EXPECT_EQ(both->elements[0].str, "a");
  EXPECT_EQ(both->elements[1].str, "b");
  auto pipelined = m_redis->pipeline(
      "{user1000}", {{"SET", "{user1000}.n", "1"}, {"INCR", "{user1000}.n"}, {"GET", "{user1000}.following"}});
  ASSERT_TRUE(pipelined) << pipelined.error().message;
  EXPECT_EQ((*pipelined)[1].integer, 2);
  EXPECT_EQ((*pipelined)[2].str, "a");
  EXPECT_EQ(m_cluster->keys_in_slot(m_cluster->primary_of(slot), slot), 3);
  auto cross = m_redis->command("a", {"MSET", "a", "1", "b", "2"});  // two slots: Redis says CROSSSLOT
  ASSERT_TRUE(cross) << cross.error().message;
  EXPECT_TRUE(cross->str.starts_with("CROSSSLOT")) << cross->str;
}

TEST_F(RedisCluster, EightThreadsOfTwoHundredOperationsAllSucceed) {
  std::atomic<int> failures{0};
  std::mutex first_mutex;
  std::string first;
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 100; ++i) {
        std::string key = "t" + std::to_string(t) + ":" + std::to_string(i);
        std::string set = text(m_redis->command(key, {"SET", key, key}));
        std::string got = text(m_redis->command(key, {"GET", key}));
        if (set != "OK" || got != key) {
          ++failures;
          std::lock_guard lock(first_mutex);
          if (first.empty()) first = key + ": " + set + " / " + got;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0) << first;
}

TEST_F(RedisCluster, DuringAMigrationAskGoesToTheTargetWithoutMovingTheSlotAndTryagainWaits) {
  const std::uint16_t slot = key_slot("m");
  const int from = m_cluster->primary_of(slot);
  int to = 0;
  for (int port : m_cluster->primaries()) {
    if (port != from) to = port;
  }
  ASSERT_EQ(text(m_redis->command("{m}", {"SET", "{m}old", "1"})), "OK");
  m_cluster->begin_migration(slot, from, to);
  m_cluster->node(to).query({"CONFIG", "RESETSTAT"});

  // The source has no {m}new: it answers ASK, and the key is made on the target.
  EXPECT_EQ(text(m_redis->command("{m}", {"SET", "{m}new", "2"})), "OK");
  EXPECT_EQ(m_cluster->keys_in_slot(to, slot), 1);
  EXPECT_EQ(m_cluster->keys_in_slot(from, slot), 1);
  EXPECT_EQ(text(m_redis->command("{m}", {"GET", "{m}new"})), "2");
  // One batch, answered in two places: {m}old by the source, the others after ASK.
  auto mixed = m_redis->pipeline("{m}", {{"GET", "{m}old"}, {"GET", "{m}new"}, {"SET", "{m}third", "3"}});
  ASSERT_TRUE(mixed) << mixed.error().message;
  EXPECT_EQ((*mixed)[0].str, "1");
  EXPECT_EQ((*mixed)[1].str, "2");
  EXPECT_EQ((*mixed)[2].str, "OK");
  // ASK left the slot table alone: {m}old is still asked of the source, so the target
  // (IMPORTING) never had to send a command back with MOVED.
  for (int i = 0; i < 3; ++i) EXPECT_EQ(text(m_redis->command("{m}", {"GET", "{m}old"})), "1");
  EXPECT_EQ(m_cluster->node(to).query({"INFO", "errorstats"}).find("MOVED"), std::string::npos);

  // A command naming keys on both sides gets TRYAGAIN meanwhile: the client waits and asks
  // again, and is answered once the migration is over.
  Expected<RedisReply> both = make_error(ErrorCode::k_unknown, "not run");
  std::thread waiting([&] { both = m_redis->command("{m}", {"MGET", "{m}old", "{m}new"}); });
  bool tried_again = false;
  for (auto deadline = Clock::now() + 5s; !tried_again && Clock::now() < deadline;) {
    tried_again = m_cluster->node(from).query({"INFO", "errorstats"}).find("errorstat_TRYAGAIN") != std::string::npos;
  }
  m_cluster->move_keys(slot, from, to);
  m_cluster->finish_migration(slot, from, to);
  waiting.join();
  EXPECT_TRUE(tried_again);
  ASSERT_TRUE(both) << both.error().message;
  ASSERT_EQ(both->elements.size(), 2u) << text(both);
  EXPECT_EQ(both->elements[0].str, "1");
  EXPECT_EQ(both->elements[1].str, "2");
  // Now the source answers MOVED; the client follows it and learns the new owner.
  EXPECT_EQ(text(m_redis->command("{m}", {"GET", "{m}old"})), "1");
  EXPECT_EQ(text(m_redis->command("{m}", {"GET", "{m}third"})), "3");
  EXPECT_EQ(m_cluster->keys_in_slot(to, slot), 3);
}

TEST_F(RedisCluster, NoOperationFailsWhileSlotsMoveUnderLoad) {
  RedisOptions options = options_of(m_cluster->seeds());
  options.operation_timeout = 2s;  // a busy 2-core machine is not what this test is about
  Redis redis(options);
  std::map<std::string, std::string> before;  // keys the resharding has to move
  for (int i = 0; i < 1000; ++i) {
    std::string key = "before:" + std::to_string(i);
    ASSERT_EQ(text(redis.command(key, {"SET", key, key})), "OK");
    before[key] = key;
  }
  auto primaries = m_cluster->primaries();
  ASSERT_EQ(primaries.size(), 3u);
  const auto owners_before = m_cluster->slot_owners();
  Load load(redis, 4, "load");
  const auto start = Clock::now();
  m_cluster->reshard(600, primaries[0], primaries[1]);
  const auto resharded = since(start);
  load.stop();
  auto [failed, which] = load.failures_since(start);
  EXPECT_EQ(failed, 0) << "of " << load.ops().size() << ":" << which;
  EXPECT_GT(load.ops().size(), 100u);
  const auto owners_after = m_cluster->slot_owners();
  EXPECT_EQ(std::count(owners_after.begin(), owners_after.end(), primaries[1]),
            std::count(owners_before.begin(), owners_before.end(), primaries[1]) + 600);
  expect_read_back(before);
  expect_read_back(load.written_since(start));
  // The load met the move: some of its commands were redirected.
  long long redirected = 0;
  for (int port : primaries) {
    std::string errors = m_cluster->node(port).query({"INFO", "errorstats"});
    for (const char* kind : {"errorstat_MOVED:count=", "errorstat_ASK:count="}) {
      if (auto at = errors.find(kind); at != std::string::npos)
        redirected += std::atoll(errors.c_str() + at + std::strlen(kind));
    }
  }
  EXPECT_GT(redirected, 0);
  std::fprintf(stderr, "600 slots moved in %lld ms under %zu operations; %lld MOVED or ASK answered\n",
               static_cast<long long>(resharded.count()), load.ops().size(), redirected);
}

TEST_F(RedisCluster, AfterKillingAPrimaryUnderLoadTheClientFindsItsReplicaWithoutAReset) {
  expect_recovery_from_kill9(false);
}

// Redis's default (cluster-require-full-coverage yes) has every node answer CLUSTERDOWN while a
// primary is missing, which sends the client to fetch the topology anyway; without it only the
// failed connections to the dead primary can tell the client to look again.
class RedisClusterWithoutFullCoverage : public RedisCluster {
 protected:
  std::vector<std::string> cluster_args() const override { return {"--cluster-require-full-coverage", "no"}; }
};

TEST_F(RedisClusterWithoutFullCoverage, AfterKillingAPrimaryTheOthersNeverFailAndTheClientFindsItsReplica) {
  expect_recovery_from_kill9(true);
}

}  // namespace
}  // namespace kcache::server::remote
