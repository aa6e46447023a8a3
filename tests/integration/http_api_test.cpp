// The HTTP image API (--http-listen) and the CLI's fast path over it: a cached `kcache compile`
// is one GET per image, with no gRPC call; whatever the fast path cannot answer for certain goes
// the full gRPC way with the same result.
#include <httplib.h>

#include <cstdlib>
#include <future>

#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

class HttpApi : public DaemonTest {
 protected:
  int http_port() {
    auto caps = m_client->capabilities(true);
    EXPECT_TRUE(caps) << caps.error().message;
    return caps ? static_cast<int>(caps->http_port()) : 0;
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
    write_file(src, read_test_data("kernels/saxpy.ll"));
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
  EXPECT_NE(stats.out.find("hit rate         50.00 % (1 of 2 compile requests)"), std::string::npos) << stats.out;

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
  std::filesystem::path state_dir = std::getenv("KCACHE_STATE_DIR");
  std::filesystem::path state;
  for (const auto& e : std::filesystem::directory_iterator(state_dir / "servers")) {
    if (e.path().filename().string().ends_with("_" + std::to_string(m_daemon->port()))) state = e.path();
  }
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

// A build runs many compiles at once: 32 concurrent cached compiles (more than cpp-httplib's
// default pool of connection threads) all come back as hits over HTTP.
TEST_F(HttpApi, ManyConcurrentCachedCompilesAreAllServed) {
  ASSERT_EQ(compile(m_dir.path() / "a").exit_code, 0);
  std::filesystem::path src = m_dir.path() / "saxpy.ll";
  std::vector<std::future<CommandResult>> runs;
  for (int i = 0; i < 32; ++i) {
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
  EXPECT_EQ(ok_calls("kcache.http", "GetImage"), 32u);
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

}  // namespace
}  // namespace kcache::test
