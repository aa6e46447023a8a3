// The HTTP image API (--http-listen) and the CLI's fast path over it: a cached `kcache compile`
// is one GET per image, with no gRPC call; whatever the fast path cannot answer for certain goes
// the full gRPC way with the same result.
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <sstream>
#include <thread>

#include "daemon_fixture.hpp"
#include "http_get.hpp"

namespace kcache::test {
namespace {

// A reply's headers, by name in lower case (the order and the case of names may differ between
// the two HTTP parsers' answers; what they say may not).
std::map<std::string, std::string> headers_of(const HttpReply& reply) {
  std::map<std::string, std::string> out;
  for (const HttpReply::Field& f : reply.fields) {
    std::string name = reply.head.substr(f.name_at, f.name_size);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    out[name] = reply.head.substr(f.value_at, f.value_size);
  }
  return out;
}

class HttpApi : public DaemonTest {
 protected:
  int http_port() {
    auto caps = m_client->capabilities(true);
    EXPECT_TRUE(caps) << caps.error().message;
    return caps ? static_cast<int>(caps->http_port()) : 0;
  }
  // The client's remembered state of this daemon, as kcache-grpc wrote it (fingerprint, host
  // triple, HTTP port); empty when there is none.
  std::filesystem::path remembered_state_file() const {
    std::filesystem::path state_dir = std::getenv("KCACHE_STATE_DIR");
    for (const auto& e : std::filesystem::directory_iterator(state_dir / "servers")) {
      if (e.path().filename().string().ends_with("_" + std::to_string(m_daemon->port()))) return e.path();
    }
    return {};
  }
  // Calls counted by the daemon for service/method with status OK.
  std::uint64_t ok_calls(const std::string& service, const std::string& method) {
    auto stats = m_client->stats();
    EXPECT_TRUE(stats) << stats.error().message;
    std::uint64_t n = 0;
    if (stats) {
      for (const auto& r : stats->requests()) {
        if (r.service() == service && r.method() == method && r.code() == "OK") n += r.count();
      }
    }
    return n;
  }
  CommandResult compile(const std::filesystem::path& out, bool fast_path = true) {
    std::filesystem::path src = m_dir.path() / "saxpy.ll";
    write_file(src, own_module(read_test_data("kernels/saxpy.ll")));  // the first compile is a miss
    if (!fast_path) ::setenv("KCACHE_FAST_PATH", "0", 1);
    CommandResult r = run_cli({"compile", src.string(), "--arch", "sm_80,sm_90", "--out-dir", out.string()},
                              m_daemon->address());
    ::unsetenv("KCACHE_FAST_PATH");
    return r;
  }
};

TEST_F(HttpApi, ACachedCompileIsAnsweredOverHttpWithTheSameOutputAndFiles) {
  CommandResult miss = compile(m_dir.path() / "a");
  ASSERT_EQ(miss.exit_code, 0) << miss.err;
  EXPECT_TRUE(miss.out.starts_with("miss  ")) << miss.out;
  std::uint64_t compiles = ok_calls("kcache.v1.KCache", "Compile");
  ASSERT_EQ(compiles, 1u);

  CommandResult fast = compile(m_dir.path() / "b");
  ASSERT_EQ(fast.exit_code, 0) << fast.err;
  EXPECT_EQ(ok_calls("kcache.v1.KCache", "Compile"), compiles) << "the hit made no gRPC call";
  EXPECT_EQ(ok_calls("kcache.http", "GetImage"), 2u) << "one GET per image";
  for (const char* file : {"sm_80.ptx", "sm_90.ptx"}) {
    EXPECT_EQ(read_file(m_dir.path() / "b" / file), read_file(m_dir.path() / "a" / file)) << file;
  }
  // Counted as the same compile over gRPC would be: one miss (one job, two images), one hit.
  auto counters = m_client->stats();
  ASSERT_TRUE(counters);
  EXPECT_EQ(counters->hits(), 1u) << "the hit over HTTP is a hit";
  EXPECT_EQ(counters->misses(), 1u);
  EXPECT_EQ(counters->compiles(), 1u) << "one compile job";
  EXPECT_EQ(counters->images_compiled(), 2u);
  EXPECT_EQ(counters->fetches(), 0u) << "a cached compile's images are not fetches";
  CommandResult stats = run_cli({"stats"}, m_daemon->address());
  EXPECT_NE(stats.out.find("hit rate                 50.00 % (1 of 2 requests: compiles and build steps)"), std::string::npos) << stats.out;

  // The full path prints exactly the same for the same hit (paths aside).
  CommandResult full = compile(m_dir.path() / "b", false);
  ASSERT_EQ(full.exit_code, 0) << full.err;
  EXPECT_EQ(ok_calls("kcache.v1.KCache", "Compile"), compiles + 1);
  EXPECT_EQ(fast.out, full.out);
  EXPECT_TRUE(fast.out.starts_with("hit  " + miss.out.substr(6, 64))) << fast.out;
}

TEST_F(HttpApi, AStaleFingerprintGoesTheFullWayAndIsRefreshed) {
  ASSERT_EQ(compile(m_dir.path() / "a").exit_code, 0);
  // The client's remembered state, as kcache-grpc wrote it: fingerprint, host triple, port.
  std::filesystem::path state = remembered_state_file();
  ASSERT_FALSE(state.empty());
  std::string remembered = read_file(state);
  ASSERT_EQ(remembered.substr(0, 64), m_client->capabilities()->fingerprint());
  write_file(state, std::string(64, '0') + remembered.substr(64));  // as if the toolchain had changed

  CommandResult again = compile(m_dir.path() / "b");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(again.out.starts_with("hit  ")) << again.out;
  EXPECT_EQ(ok_calls("kcache.v1.KCache", "Compile"), 2u) << "the key computed with the wrong fingerprint missed";
  EXPECT_EQ(read_file(state), remembered) << "kcache-grpc refreshed the state";
  EXPECT_EQ(read_file(m_dir.path() / "b" / "sm_90.ptx"), read_file(m_dir.path() / "a" / "sm_90.ptx"));
}

TEST_F(HttpApi, ExplainsEachBadRequestAndKeepsServing) {
  ASSERT_EQ(compile(m_dir.path() / "a").exit_code, 0);
  httplib::Client http("127.0.0.1", http_port());
  std::string fingerprint = m_client->capabilities()->fingerprint();
  auto fp = http.Get("/v1/fingerprint");
  ASSERT_TRUE(fp);
  EXPECT_EQ(fp->status, 200);
  EXPECT_EQ(fp->body, fingerprint + "\n");

  struct Case {
    std::string path;
    int status;
    std::string code, message;
  };
  const std::string zeros(64, '0');
  std::vector<Case> cases = {
      {"/v1/device/not-a-key/sm_90/ptx", 400, "INVALID_ARGUMENT", "64 hex"},
      {"/v1/device/" + zeros + "/sm_90/ptx", 404, "NOT_FOUND", zeros},
      {"/v1/device/" + zeros + "/sm_90/elf", 400, "INVALID_ARGUMENT", "unknown image kind 'elf'"},
      {"/v1/device/" + zeros + "/sm_90/99", 400, "INVALID_ARGUMENT", "unknown image kind '99'"},
      {"/v1/77/" + zeros + "/sm_90/ptx", 400, "INVALID_ARGUMENT", "unknown side '77' (use device or host)"},
      {"/v1/select/77/" + zeros + "/sm_90", 400, "INVALID_ARGUMENT", "unknown side '77'"},
      {"/v1/select/device/" + zeros + "/sm_90?kind=99", 400, "INVALID_ARGUMENT", "unknown image kind '99'"},
      {"/v1/host/" + zeros + "/x86_64/obj", 404, "NOT_FOUND", "no obj image for x86_64"},
  };
  for (const Case& c : cases) {
    auto res = http.Get(c.path.c_str());
    ASSERT_TRUE(res) << c.path;
    EXPECT_EQ(res->status, c.status) << c.path;
    EXPECT_EQ(res->get_header_value("X-Kcache-Error"), c.code) << c.path;
    EXPECT_NE(res->body.find(c.message), std::string::npos) << c.path << ": " << res->body;
    EXPECT_EQ(res->get_header_value("X-Kcache-Fingerprint"), fingerprint) << c.path;
  }
  auto elsewhere = http.Get("/v2/anything");
  ASSERT_TRUE(elsewhere);
  EXPECT_EQ(elsewhere->status, 404);

  CommandResult still = compile(m_dir.path() / "b");
  ASSERT_EQ(still.exit_code, 0) << still.err;
  EXPECT_TRUE(still.out.starts_with("hit  ")) << still.out;
}

// Without tokens, a page in a browser could reach the listener through a name it controls that
// resolves to this machine (DNS rebinding): a request for a name other than an address, localhost
// or the machine's own is refused with 421, before any route runs. Every answer says nosniff.
TEST_F(HttpApi, ARequestForAnotherHostNameIsRefusedWithoutTokens) {
  httplib::Client http("127.0.0.1", http_port());
  for (const char* host : {"rebound.example", "rebound.example:7879", "localhost.rebound.example"}) {
    for (const char* path : {"/v1/fingerprint", "/", "/v1/status"}) {
      auto res = http.Get(path, httplib::Headers{{"Host", host}});
      ASSERT_TRUE(res) << host << path;
      EXPECT_EQ(res->status, 421) << host << path;
      EXPECT_NE(res->body.find("--http-host"), std::string::npos) << res->body;
      EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff");
    }
  }
  for (std::string host : {std::string("127.0.0.1"), "localhost:" + std::to_string(http_port()), std::string("[::1]:80"),
                           std::string("LOCALHOST")}) {
    auto res = http.Get("/v1/fingerprint", httplib::Headers{{"Host", host}});
    ASSERT_TRUE(res) << host;
    EXPECT_EQ(res->status, 200) << host;
    EXPECT_EQ(res->get_header_value("X-Content-Type-Options"), "nosniff") << host;
  }
  auto missing = http.Get("/v1/device/" + std::string(64, '0') + "/sm_90/ptx");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(missing->get_header_value("X-Content-Type-Options"), "nosniff");
}

class NamedHttpApi : public HttpApi {
 protected:
  std::vector<std::string> daemon_args() const override {
    return {"--http-host", "farm.example", "--http-host", ".svc.cluster.local"};
  }
};

TEST_F(NamedHttpApi, ANameGivenWithHttpHostIsServed) {
  httplib::Client http("127.0.0.1", http_port());
  auto named = http.Get("/v1/fingerprint", httplib::Headers{{"Host", "farm.example:7879"}});
  ASSERT_TRUE(named);
  EXPECT_EQ(named->status, 200);
  auto cluster = http.Get("/v1/fingerprint", httplib::Headers{{"Host", "kcached.farm.svc.cluster.local:7879"}});
  ASSERT_TRUE(cluster);
  EXPECT_EQ(cluster->status, 200);
  for (const char* other : {"other.example", "svc.cluster.local.example", "cluster.local"}) {
    auto res = http.Get("/v1/fingerprint", httplib::Headers{{"Host", other}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 421) << other;
  }
}

// A build runs many compiles at once: 32 concurrent cached compiles (more than cpp-httplib's
// default pool of connection threads) all come back as hits over HTTP.
TEST_F(HttpApi, ManyConcurrentCachedCompilesAreAllServed) {
  ASSERT_EQ(compile(m_dir.path() / "a").exit_code, 0);
  std::filesystem::path src = m_dir.path() / "saxpy.ll";
  std::vector<std::future<CommandResult>> runs;
  // 32 CLI processes at once; 12 under the sanitizers, where each start is 0.25 CPU-s.
  const int clients = k_asan_build ? 12 : 32;
  for (int i = 0; i < clients; ++i) {
    std::filesystem::path out = m_dir.path() / ("k" + std::to_string(i) + ".ptx");
    runs.push_back(std::async(std::launch::async, [&, out] {
      return run_cli({"compile", src.string(), "--arch", "sm_90", "-o", out.string()}, m_daemon->address());
    }));
  }
  for (auto& r : runs) {
    CommandResult done = r.get();
    EXPECT_EQ(done.exit_code, 0) << done.err;
    EXPECT_TRUE(done.out.starts_with("hit  ")) << done.out;
  }
  EXPECT_EQ(ok_calls("kcache.http", "GetImage"), static_cast<std::uint64_t>(clients));
  EXPECT_EQ(ok_calls("kcache.v1.KCache", "Compile"), 1u);
}

// Client::fetch over HTTP chooses and answers exactly as the gRPC Fetch does: the image, its
// metadata (needs_jit included) and the errors.
TEST_F(HttpApi, ClientFetchOverHttpAgreesWithGrpc) {
  CommandResult miss = compile(m_dir.path() / "a");  // sm_80 and sm_90 PTX
  ASSERT_EQ(miss.exit_code, 0) << miss.err;
  std::string key = miss.out.substr(6, 64);
  ClientOptions grpc_only{m_daemon->address()};
  grpc_only.http_fetch = false;
  Client grpc_client(grpc_only), http_client(ClientOptions{m_daemon->address()});
  std::uint64_t http_before = ok_calls("kcache.http", "SelectImage");
  struct Case {
    std::string key, arch;
    v1::ImageKind kind;
  };
  for (const Case& c : std::vector<Case>{{key, "sm_90", v1::KIND_UNSPECIFIED},
                                         {key, "sm_86", v1::KIND_UNSPECIFIED},  // sm_80's PTX, JIT
                                         {key, "sm_90", v1::KIND_CUBIN},        // not stored
                                         {key, "sm_75", v1::KIND_UNSPECIFIED},  // nothing runs there
                                         {std::string(64, '0'), "sm_90", v1::KIND_UNSPECIFIED},
                                         {"not-a-key", "sm_90", v1::KIND_UNSPECIFIED}}) {
    v1::FetchRequest request;
    request.set_key(c.key);
    request.set_arch(c.arch);
    request.set_kind(c.kind);
    auto over_grpc = grpc_client.fetch(request);
    auto over_http = http_client.fetch(request);
    ASSERT_EQ(over_grpc.ok(), over_http.ok()) << c.arch;
    if (over_grpc) {
      EXPECT_EQ(over_http->data, over_grpc->data) << c.arch;
      EXPECT_EQ(over_http->image.SerializeAsString(), over_grpc->image.SerializeAsString()) << c.arch;
    } else {
      EXPECT_EQ(over_http.error().code, over_grpc.error().code) << c.arch;
      EXPECT_EQ(over_http.error().message, over_grpc.error().message) << c.arch;
    }
  }
  EXPECT_GE(ok_calls("kcache.http", "SelectImage"), http_before + 2) << "the HTTP client really used HTTP";
}

// The select route's plain requests (all that Client::fetch sends) are answered by a fast route
// that skips cpp-httplib's parser; any other spelling of the same request (here an escaped
// character, which only cpp-httplib decodes) by cpp-httplib's route. Both answer alike, header
// for header, errors included, and Connection: close closes either way.
TEST_F(HttpApi, TheFastSelectRouteAnswersExactlyAsCppHttplibsRouteDoes) {
  CommandResult miss = compile(m_dir.path() / "a");  // sm_80 and sm_90 PTX
  ASSERT_EQ(miss.exit_code, 0) << miss.err;
  const std::string key = miss.out.substr(6, 64);
  struct Case {
    std::string plain, escaped;  // the same request, spelled two ways
    int status;
  };
  const std::string select = "/v1/select/device/";
  const std::vector<Case> cases = {
      {select + key + "/sm_90", select + key + "/%73m_90", 200},
      {select + key + "/sm_86?kind=ptx", select + key + "/sm_86?kind=%70tx", 200},  // sm_80's, JIT
      {select + key + "/sm_90?kind=ptx&driver=13.0", select + key + "/sm_90?kind=ptx&driver=13%2E0", 200},
      {select + key + "/sm_90?driver=12.4", select + key + "/sm_90?driver=12%2E4", 404},  // too old
      {select + key + "/sm_90?kind=cubin", select + key + "/sm_90?kind=%63ubin", 404},
      {select + key + "/sm_90?kind=elf", select + key + "/sm_90?kind=%65lf", 400},
      {select + key + "/sm_90?driver=twelve", select + key + "/sm_90?driver=%74welve", 400},
      {select + std::string(64, '0') + "/sm_90", select + std::string(64, '0') + "/%73m_90", 404},
      {select + "not-a-key/sm_90", select + "not-a-key/%73m_90", 400},
  };
  auto http = HttpConnection::open("127.0.0.1", http_port(), std::chrono::milliseconds(5000));
  ASSERT_TRUE(http) << http.error().message;
  for (const Case& c : cases) {
    std::uint64_t before = ok_calls("kcache.http", "SelectImage");
    auto plain = http->get(c.plain, {});
    auto escaped = http->get(c.escaped, {});
    ASSERT_TRUE(plain && escaped) << c.plain;
    EXPECT_EQ(plain->status, c.status) << c.plain << ": " << plain->body;
    EXPECT_EQ(plain->status, escaped->status) << c.plain;
    EXPECT_EQ(headers_of(*plain), headers_of(*escaped)) << c.plain;
    EXPECT_EQ(plain->body, escaped->body) << c.plain;
    EXPECT_EQ(ok_calls("kcache.http", "SelectImage"), before + (c.status == 200 ? 2 : 0)) << c.plain;
    ASSERT_TRUE(http->reusable()) << c.plain;
  }
  // Asked to close: the answer says so, and the daemon closes the connection after it.
  for (const std::string& path : {cases[0].plain, cases[0].escaped}) {
    auto once = HttpConnection::open("127.0.0.1", http_port(), std::chrono::milliseconds(5000));
    ASSERT_TRUE(once);
    auto reply = once->get(path, {{"Connection", "close"}});
    ASSERT_TRUE(reply) << path;
    EXPECT_EQ(reply->status, 200) << path;
    EXPECT_EQ(reply->header("connection"), "close") << path;
    EXPECT_FALSE(once->reusable()) << path;
  }
}

// A daemon with --http-listen off: the CLI learns there is no HTTP API and always goes the full way.
class NoHttpApi : public HttpApi {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--http-listen", "off"}; }
};

TEST_F(NoHttpApi, TheCliUsesGrpcForEveryCall) {
  EXPECT_EQ(http_port(), 0);
  ASSERT_EQ(compile(m_dir.path() / "a").exit_code, 0);
  CommandResult hit = compile(m_dir.path() / "b");
  ASSERT_EQ(hit.exit_code, 0) << hit.err;
  EXPECT_TRUE(hit.out.starts_with("hit  ")) << hit.out;
  EXPECT_EQ(ok_calls("kcache.v1.KCache", "Compile"), 2u);
}

// A raw TCP listener on loopback standing in for a broken or hostile HTTP server: each
// connection it accepts gets `replies` in turn, one per request it reads (up to the blank line),
// and is then held open, unanswered, until the server is destroyed. No replies: a listener that
// accepts and never answers.
class RawServer {
 public:
  explicit RawServer(std::vector<std::string> replies) : m_replies(std::move(replies)) {
    m_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (m_fd < 0 || ::bind(m_fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(m_fd, 64) != 0 ||
        ::getsockname(m_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      throw std::runtime_error(std::string("raw server: ") + std::strerror(errno));
    }
    m_port = ntohs(addr.sin_port);
    m_thread = std::thread([this] { serve(); });
  }
  ~RawServer() {
    m_stop = true;
    m_thread.join();
    for (int c : m_connections) ::close(c);
    ::close(m_fd);
  }
  int port() const { return m_port; }

 private:
  // Waits up to 50 ms for `fd` to be readable; false also when stopping.
  bool readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return !m_stop && ::poll(&p, 1, 50) > 0;
  }
  void serve() {
    while (!m_stop) {
      if (!readable(m_fd)) continue;
      int c = ::accept4(m_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      m_connections.push_back(c);
      std::string request;
      for (const std::string& reply : m_replies) {
        while (request.find("\r\n\r\n") == std::string::npos) {
          if (!readable(c)) {
            if (m_stop) return;
            continue;
          }
          char buffer[4096];
          ssize_t n = ::recv(c, buffer, sizeof(buffer), 0);
          if (n <= 0) break;
          request.append(buffer, static_cast<std::size_t>(n));
        }
        request.erase(0, request.find("\r\n\r\n") + 4);
        ::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      }
    }
  }

  std::vector<std::string> m_replies;
  int m_fd = -1;
  int m_port = 0;
  std::atomic<bool> m_stop{false};
  std::vector<int> m_connections;  // held open until the end
  std::thread m_thread;
};

// Each reply the client cannot take for certain is refused, with a reason, within its timeout,
// and the connection is not used again: a body left unread would be taken for the next reply.
TEST(HttpGet, EachBadReplyIsRefusedAndItsConnectionNotReused) {
  const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
  struct Case {
    std::string reply;
    std::string message;
  };
  const Case cases[] = {
      {"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\nhello", "Content-Length \"-1\" is not a byte count"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 5x\r\n\r\nhello", "Content-Length \"5x\" is not a byte count"},
      {"HTTP/1.1 200 OK\r\nContent-Length: \r\n\r\nhello", "Content-Length \"\" is not a byte count"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 0x10\r\n\r\nhello", "is not a byte count"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 18446744073709551621\r\n\r\nhello", "is not a byte count"},  // 2^64 + 5
      {"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\nhello", "is not a byte count"},
      {"HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(k_max_http_body_bytes + 1) + "\r\n\r\nhello",
       "is not a byte count up to 1073741824"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 50\r\n\r\nhello", "more than one Content-Length"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\ncontent-LENGTH: 5\r\n\r\nhello", "more than one Content-Length"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", "Transfer-Encoding \"chunked\""},
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\nhello", "Transfer-Encoding"},
      {"HTTP/1.1 200 OK\r\n\r\nhello", "without Content-Length"},
      {"HTTP/1.1 2x0 OK\r\nContent-Length: 5\r\n\r\nhello", "not an HTTP reply"},
      {"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP reply"},
      {"HTTP/1.1 100 Continue\r\n\r\n" + ok, "unexpected HTTP status 100"},
      {"HTTP/1.1 200 OK\r\nno colon here\r\nContent-Length: 5\r\n\r\nhello", "malformed HTTP header line"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello", "timed out"},  // the body never comes whole
      {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n", "timed out"},            // nor the end of the headers
      {"HTTP/1.1 200 OK\r\nX-Long: " + std::string(70000, 'x') + "\r\n\r\n", "HTTP headers too long"},
  };
  for (const Case& c : cases) {
    RawServer server({c.reply, ok});
    auto started = std::chrono::steady_clock::now();
    auto http = HttpConnection::open("127.0.0.1", server.port(), std::chrono::milliseconds(500));
    ASSERT_TRUE(http) << http.error().message;
    auto reply = http->get("/x", {});
    ASSERT_FALSE(reply) << c.reply.substr(0, 80) << ": accepted";
    EXPECT_EQ(reply.error().code, ErrorCode::k_unavailable);
    EXPECT_NE(reply.error().message.find(c.message), std::string::npos)
        << c.reply.substr(0, 80) << "\n  got: " << reply.error().message;
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(3));
    EXPECT_FALSE(http->reusable());
    auto again = http->get("/x", {});
    ASSERT_FALSE(again) << c.reply.substr(0, 80) << ": the connection was used again";
    EXPECT_NE(again.error().message.find("not reusable"), std::string::npos) << again.error().message;
  }
}

// A whole reply keeps the connection for the next request; one that closes it, or leaves bytes
// after its body, does not.
TEST(HttpGet, OnlyAWholeReplyWithNothingAfterItKeepsTheConnection) {
  const std::string ok = "HTTP/1.1 200 OK\r\ncontent-length:  5 \r\nX-Kcache-Sha256: abc\r\n\r\nhello";
  {
    RawServer server({ok, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"});
    auto http = HttpConnection::open("127.0.0.1", server.port(), std::chrono::milliseconds(1000));
    ASSERT_TRUE(http);
    auto first = http->get("/a", {});
    ASSERT_TRUE(first) << first.error().message;
    EXPECT_EQ(first->status, 200);
    EXPECT_EQ(first->body, "hello");
    EXPECT_EQ(first->header("x-kcache-sha256"), "abc");
    EXPECT_TRUE(http->reusable());
    auto second = http->get("/b", {});
    ASSERT_TRUE(second) << second.error().message;
    EXPECT_EQ(second->status, 404);
    EXPECT_EQ(second->body, "");
  }
  for (const char* reply : {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                            "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello",
                            "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\n"}) {
    RawServer server({reply, ok});
    auto http = HttpConnection::open("127.0.0.1", server.port(), std::chrono::milliseconds(1000));
    ASSERT_TRUE(http);
    auto first = http->get("/a", {});
    ASSERT_TRUE(first) << first.error().message;
    EXPECT_EQ(first->body, "hello");
    EXPECT_FALSE(http->reusable()) << reply;
  }
}

// The CLI's HTTP path has its own short limits: a daemon whose HTTP listener accepts and never
// answers costs it about a second, not --timeout, and gRPC then answers the cached compile.
TEST_F(HttpApi, AWedgedHttpListenerCostsTheFastPathASecondThenGrpcAnswers) {
  ASSERT_EQ(compile(m_dir.path() / "a").exit_code, 0);
  std::filesystem::path state = remembered_state_file();
  ASSERT_FALSE(state.empty());
  std::istringstream remembered(read_file(state));
  std::string fingerprint, triple;
  remembered >> fingerprint >> triple;
  RawServer wedged({});
  // The remembered HTTP port now leads to the wedged listener (as a daemon whose HTTP side hangs).
  write_file(state, fingerprint + " " + triple + " " + std::to_string(wedged.port()) + "\n");

  std::filesystem::path src = m_dir.path() / "saxpy.ll";
  auto started = std::chrono::steady_clock::now();
  CommandResult r = run_cli({"--timeout", "30", "compile", src.string(), "--arch", "sm_80,sm_90", "--out-dir",
                             (m_dir.path() / "b").string()},
                            m_daemon->address());
  auto took = std::chrono::steady_clock::now() - started;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.out.starts_with("hit  ")) << r.out;
  EXPECT_LT(took, std::chrono::seconds(5)) << "the fast path waited on the wedged listener";
  EXPECT_GE(took, std::chrono::milliseconds(900)) << "the wedged listener was tried";
  EXPECT_EQ(ok_calls("kcache.v1.KCache", "Compile"), 2u) << "gRPC answered";
  EXPECT_EQ(read_file(m_dir.path() / "b" / "sm_90.ptx"), read_file(m_dir.path() / "a" / "sm_90.ptx"));
}

}  // namespace
}  // namespace kcache::test
