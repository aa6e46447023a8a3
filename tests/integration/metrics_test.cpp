// The Prometheus endpoint (--metrics-listen): well-formed text exposition with request counts by
// method and status, hits and misses, the compile-latency histogram, queue depth, bytes stored,
// evictions and worker restarts; and `kcache stats` showing the same numbers.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <regex>
#include <sstream>

#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

class Metrics : public DaemonTest {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--metrics-listen", "127.0.0.1:0"}; }

  int metrics_port() const {
    std::smatch m;
    std::string log = read_file(m_dir.path() / "kcached.log");
    static const std::regex k_line("metrics: http://127\\.0\\.0\\.1:([0-9]+)/metrics");
    return std::regex_search(log, m, k_line) ? std::stoi(m[1]) : 0;
  }

  // name{labels} -> value, for every sample; fails the test on a line that is not well formed.
  std::map<std::string, double> scrape() {
    httplib::Client http("127.0.0.1", metrics_port());
    auto res = http.Get("/metrics");
    EXPECT_TRUE(res) << "no answer from the metrics endpoint";
    if (!res) return {};
    EXPECT_EQ(res->status, 200);
    EXPECT_NE(res->get_header_value("Content-Type").find("text/plain; version=0.0.4"), std::string::npos);
    static const std::regex k_sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})?) (\S+)$)");
    static const std::regex k_comment(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$)");
    std::map<std::string, double> samples;
    std::istringstream lines(res->body);
    for (std::string line; std::getline(lines, line);) {
      std::smatch m;
      if (std::regex_match(line, m, k_comment)) continue;
      EXPECT_TRUE(std::regex_match(line, m, k_sample)) << "not a sample line: " << line;
      if (m.size() > 4) samples[m[1]] = std::stod(m[4]);
    }
    return samples;
  }
};

TEST_F(Metrics, TheEndpointCountsRequestsOutcomesAndCompileTimes) {
  ASSERT_GT(metrics_port(), 0);
  v1::CompileRequest saxpy = device_request(read_test_data("kernels/saxpy.ll"), {"sm_80"});
  ASSERT_TRUE(m_client->compile(saxpy));  // miss
  ASSERT_TRUE(m_client->compile(saxpy));  // hit
  ASSERT_FALSE(m_client->compile(device_request("not IR", {"sm_80"})));

  auto m = scrape();
  EXPECT_EQ(m["kcache_requests_total{service=\"kcache.v1.KCache\",method=\"Compile\",code=\"OK\"}"], 2);
  EXPECT_EQ(m["kcache_requests_total{service=\"kcache.v1.KCache\",method=\"Compile\",code=\"INVALID_ARGUMENT\"}"], 1);
  EXPECT_EQ(m["kcache_hits_total"], 1);
  EXPECT_EQ(m["kcache_misses_total"], 1);
  EXPECT_EQ(m["kcache_coalesced_total"], 0);
  EXPECT_EQ(m["kcache_compiles_total"], 1) << "jobs, not images";
  EXPECT_EQ(m["kcache_images_compiled_total"], 1);
  EXPECT_EQ(m["kcache_hit_ratio"], 0.5) << "the figure kcache stats shows";
  EXPECT_EQ(m["kcache_compile_duration_seconds_count"], 2);  // the good compile and the refused one
  EXPECT_EQ(m["kcache_compile_duration_seconds_bucket{le=\"+Inf\"}"], 2);
  EXPECT_GT(m["kcache_compile_duration_seconds_sum"], 0);
  EXPECT_EQ(m.count("kcache_queued_jobs"), 1u);
  // How tools run on peers' bytes, as GetStats says it (bwrap where this machine allows it).
  auto daemon_stats = m_client->stats();
  ASSERT_TRUE(daemon_stats);
  EXPECT_EQ(m["kcache_jail_info{mode=\"" + daemon_stats->jail() + "\",steps_unjailed=\"false\"}"], 1)
      << daemon_stats->jail_reason();
  EXPECT_GT(m["kcache_bytes"], 0);
  EXPECT_EQ(m["kcache_entries"], 1);
  EXPECT_EQ(m.count("kcache_evictions_total"), 1u);
  EXPECT_EQ(m.count("kcache_worker_restarts_total"), 1u);

  // kcache stats shows the same numbers.
  CommandResult stats = run_cli({"stats"}, m_daemon->address());
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_NE(stats.out.find("Compile          INVALID_ARGUMENT     1"), std::string::npos) << stats.out;
  EXPECT_NE(stats.out.find("compile time: 2 compiles"), std::string::npos) << stats.out;
  EXPECT_NE(stats.out.find("hit rate                 50.00 % (1 of 2 requests: compiles and build steps)"), std::string::npos) << stats.out;
}

// Anyone may call any method name, token or not; names no service defines share one label, so
// neither /metrics nor GetStats grows with them.
TEST_F(Metrics, UnknownMethodsCountUnderOneLabel) {
  auto channel = grpc::CreateChannel(m_daemon->address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  for (int i = 0; i < 50; ++i) {
    grpc::ClientContext ctx;
    grpc::Slice empty("", 0);
    grpc::ByteBuffer request(&empty, 1), reply;
    std::string method = "/no.such.Service/" + std::string(2000, 'x') + std::to_string(i);
    grpc::Status status;
    std::mutex mutex;
    std::condition_variable done;
    bool finished = false;
    generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &reply, [&](grpc::Status s) {
      std::lock_guard lock(mutex);
      status = s;
      finished = true;
      done.notify_one();
    });
    std::unique_lock lock(mutex);
    done.wait(lock, [&] { return finished; });
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  }
  auto m = scrape();
  EXPECT_EQ(m["kcache_requests_total{service=\"unknown\",method=\"unknown\",code=\"UNIMPLEMENTED\"}"], 50);
  for (const auto& [sample, value] : m) EXPECT_EQ(sample.find("xxxx"), std::string::npos) << sample;
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_LT(stats->ByteSizeLong(), 4096u);
}

// Issue 29: a refusal counts under the status the client saw. A message over the receive limit is
// refused by gRPC core (RESOURCE_EXHAUSTED) before any handler or interceptor exists: core fails
// the call's first read and drops the call unpublished (Server::CallData::PublishNewRpc), so the
// counting interceptor never sees it. The gRPC gate reads each call's method and the length its
// message declares (net/grpc_calls.hpp) and counts it instead.
class MetricsSmallLimit : public Metrics {
 protected:
  std::vector<std::string> daemon_args() const override {
    return {"--metrics-listen", "127.0.0.1:0", "--max-module-size", "64K"};
  }
};

TEST_F(MetricsSmallLimit, ARefusalCountsUnderTheStatusTheClientSaw) {
  ASSERT_GT(metrics_port(), 0);
  for (int i = 0; i < 3; ++i) {
    auto r = m_client->compile(device_request(std::string(3 << 20, ' '), {"sm_90"}));
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::k_resource_exhausted) << r.error().message;
  }
  auto m = scrape();
  EXPECT_EQ(m["kcache_requests_total{service=\"kcache.v1.KCache\",method=\"Compile\",code=\"RESOURCE_EXHAUSTED\"}"], 3);
  for (const auto& [sample, value] : m) EXPECT_EQ(sample.find("code=\"INTERNAL\""), std::string::npos) << sample;
}

}  // namespace
}  // namespace kcache::test
