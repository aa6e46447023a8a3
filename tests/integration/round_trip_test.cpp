// Compile, hit, restart, still hit: the cache survives the daemon, byte for byte.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <signal.h>

#include <optional>
#include <set>
#include <thread>

#include "daemon_fixture.hpp"
#include "grpc/health/v1/health.grpc.pb.h"

namespace kcache::test {
namespace {

using RoundTrip = DaemonTest;

TEST_F(RoundTrip, MissThenHitThenHitAfterRestartWithIdenticalBytes) {
  auto request = device_request(read_test_data("kernels/saxpy.ll"), {"sm_80"});
  auto first = m_client->compile(request);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->outcome(), v1::OUTCOME_MISS);
  ASSERT_EQ(first->images_size(), 1);
  EXPECT_NE(first->images(0).data().find(".entry saxpy"), std::string::npos);
  EXPECT_EQ(first->images(0).sha256(), sha256_hex(first->images(0).data()));

  auto second = m_client->compile(request);
  ASSERT_TRUE(second);
  EXPECT_EQ(second->outcome(), v1::OUTCOME_HIT);
  EXPECT_EQ(second->key(), first->key());
  EXPECT_EQ(second->images(0).data(), first->images(0).data());

  restart();
  auto third = m_client->compile(request);
  ASSERT_TRUE(third) << third.error().message;
  EXPECT_EQ(third->outcome(), v1::OUTCOME_HIT);
  EXPECT_EQ(third->images(0).data(), first->images(0).data());
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->entries(), 1u);
  EXPECT_EQ(stats->hits(), 1u);
  EXPECT_EQ(stats->misses(), 0u);  // counters are per process; the store's usage persists
  EXPECT_EQ(stats->bytes(), first->images(0).size());
}

TEST_F(RoundTrip, ASecondArchAddsAnImageUnderTheSameKey) {
  std::string module = read_test_data("kernels/saxpy.ll");
  auto a = m_client->compile(device_request(module, {"sm_80"}));
  auto b = m_client->compile(device_request(module, {"sm_90"}));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->key(), b->key());
  EXPECT_EQ(b->outcome(), v1::OUTCOME_MISS);
  auto both = m_client->compile(device_request(module, {"sm_90", "sm_80"}));
  ASSERT_TRUE(both);
  EXPECT_EQ(both->outcome(), v1::OUTCOME_HIT);

  v1::LookupRequest lookup;
  lookup.add_keys(a->key());
  auto found = m_client->lookup(lookup);
  ASSERT_TRUE(found);
  ASSERT_EQ(found->results_size(), 1);
  EXPECT_TRUE(found->results(0).found());
  EXPECT_EQ(found->results(0).images_size(), 2);
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->entries(), 1u);
  EXPECT_EQ(stats->images(), 2u);
}

TEST_F(RoundTrip, FetchStreamsTheStoredImage) {
  // A module of its own: its key holds the sm_80 image alone.
  auto compiled = m_client->compile(device_request(own_module(read_test_data("kernels/saxpy.ll")), {"sm_80"}));
  ASSERT_TRUE(compiled);
  v1::FetchRequest fetch;
  fetch.set_key(compiled->key());
  fetch.set_arch("sm_86");  // no sm_86 image: the sm_80 PTX, JIT-compiled by the driver
  auto image = m_client->fetch(fetch);
  ASSERT_TRUE(image) << image.error().message;
  EXPECT_EQ(image->data, compiled->images(0).data());
  EXPECT_TRUE(image->image.needs_jit());
  EXPECT_EQ(image->image.arch(), "sm_80");

  fetch.set_arch("sm_75");
  auto none = m_client->fetch(fetch);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::k_not_found);
  EXPECT_NE(none.error().message.find("sm_80.ptx"), std::string::npos) << none.error().message;
}

TEST_F(RoundTrip, LookupReportsMissingKeys) {
  v1::LookupRequest lookup;
  lookup.add_keys(std::string(64, 'a'));
  auto r = m_client->lookup(lookup);
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->results(0).found());
  lookup.add_keys("not-a-key");
  auto bad = m_client->lookup(lookup);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::k_invalid_argument);
}

// The reflection service's list of services, or nullopt when the call fails (not served).
std::optional<std::string> reflected_services(const std::shared_ptr<grpc::Channel>& channel) {
  grpc::ClientContext rctx;
  grpc::GenericStub generic(channel);
  // A ServerReflectionRequest with list_services = "" is field 7, an empty string: bytes 0x3a 0x00.
  const char request_bytes[] = {0x3a, 0x00};
  grpc::Slice slice(request_bytes, sizeof request_bytes);
  grpc::ByteBuffer request(&slice, 1);
  grpc::CompletionQueue cq;
  auto call = generic.PrepareCall(&rctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag = nullptr;
  bool ok = false;
  std::optional<std::string> text;
  call->StartCall(reinterpret_cast<void*>(1));
  if (cq.Next(&tag, &ok) && ok) {
    call->Write(request, reinterpret_cast<void*>(2));
    grpc::ByteBuffer reply;
    std::vector<grpc::Slice> slices;
    if (cq.Next(&tag, &ok) && ok) call->Read(&reply, reinterpret_cast<void*>(3));
    if (ok && cq.Next(&tag, &ok) && ok && reply.Dump(&slices).ok()) {
      text.emplace();
      for (const grpc::Slice& s : slices) text->append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  rctx.TryCancel();
  call->Finish(nullptr, reinterpret_cast<void*>(4));
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return text;
}

// Health needs no token and is always served; reflection needs no token either, so it is off
// unless --reflection asks for it.
TEST_F(RoundTrip, ServesHealthAndNoReflectionUnlessAskedFor) {
  auto channel = grpc::CreateChannel(m_daemon->address(), grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(health->Check(&ctx, req, &resp).ok());
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_FALSE(reflected_services(channel)) << "reflection served without --reflection";
}

class Reflection : public DaemonTest {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--reflection"}; }
};

TEST_F(Reflection, ListsTheServicesWhenTurnedOn) {
  auto text = reflected_services(grpc::CreateChannel(m_daemon->address(), grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(text);
  EXPECT_NE(text->find("kcache.v1.KCache"), std::string::npos);
  EXPECT_NE(text->find("grpc.health.v1.Health"), std::string::npos);
}

TEST_F(RoundTrip, CapabilitiesDescribeTheToolchain) {
  auto caps = m_client->capabilities();
  ASSERT_TRUE(caps) << caps.error().message;
  EXPECT_EQ(caps->fingerprint().size(), 64u);
  EXPECT_EQ(caps->llvm_version().substr(0, 3), "22.");
  EXPECT_FALSE(caps->rtlib_digest().empty());
  auto has = [&](const std::string& arch) {
    return std::find(caps->device_archs().begin(), caps->device_archs().end(), arch) != caps->device_archs().end();
  };
  EXPECT_TRUE(has("sm_52"));
  EXPECT_TRUE(has("sm_90a"));
  EXPECT_TRUE(has("sm_120"));
  EXPECT_FALSE(has("sm_35"));
  EXPECT_EQ(caps->cuda_present(), !ptxas_path().empty());
  EXPECT_GT(caps->limits().max_module_bytes(), 0u);
  // Each arch once (ptxas --help names its default arch, sm_75, a second time).
  std::set<std::string> cubin(caps->cubin_archs().begin(), caps->cubin_archs().end());
  EXPECT_EQ(cubin.size(), static_cast<std::size_t>(caps->cubin_archs_size()));
}

// The daemon names the workers' assembler, but only they load nvJitLink: mapped in kcached it
// would stay resident (~26 MiB) for nothing, since kcached never assembles a cubin itself.
TEST_F(RoundTrip, TheDaemonNamesNvJitLinkButOnlyItsWorkersLoadIt) {
  auto caps = m_client->capabilities();
  ASSERT_TRUE(caps) << caps.error().message;
  std::string maps = read_file("/proc/" + std::to_string(m_daemon->pid()) + "/maps");
  EXPECT_EQ(maps.find("libnvJitLink"), std::string::npos) << "kcached itself maps nvJitLink";
  if (ptxas_path().empty()) {
    EXPECT_EQ(caps->cubin_assembler(), "none");
    return;
  }
  if (!std::filesystem::exists("/usr/local/cuda/lib64/libnvJitLink.so")) {
    EXPECT_EQ(caps->cubin_assembler(), "ptxas");
    return;
  }
  EXPECT_EQ(caps->cubin_assembler().rfind("nvJitLink 1", 0), 0u) << caps->cubin_assembler();
  // A cubin still comes out: a worker assembled it.
  auto compiled = m_client->compile(device_request(read_test_data("kernels/saxpy.ll"), {"sm_90"}, {v1::KIND_CUBIN}));
  ASSERT_TRUE(compiled) << compiled.error().message;
  ASSERT_EQ(compiled->images_size(), 1);
  EXPECT_EQ(compiled->images(0).data().substr(0, 4), "\x7f" "ELF");
}

TEST_F(RoundTrip, PtxIsAcceptedByPtxas) {
  std::filesystem::path ptxas = ptxas_path();
  if (ptxas.empty()) GTEST_SKIP() << "no CUDA toolkit: /usr/local/cuda/bin/ptxas is absent";
  auto compiled = m_client->compile(device_request(read_test_data("kernels/saxpy.ll"), {"sm_80", "sm_90"}));
  ASSERT_TRUE(compiled) << compiled.error().message;
  for (const v1::Image& image : compiled->images()) {
    std::filesystem::path file = m_dir.path() / (image.arch() + ".ptx");
    write_file(file, image.data());
    auto r = run_program({ptxas.string(), "-arch=" + image.arch(), "-o", (m_dir.path() / "out.cubin").string(),
                          file.string()});
    EXPECT_EQ(r.exit_code, 0) << image.arch() << ": " << r.err << r.out;
  }
}

}  // namespace
}  // namespace kcache::test

namespace kcache::test {
namespace {

TEST_F(RoundTrip, SigtermLetsTheCompileInProgressFinishAndKeepsIt) {
  v1::CompileRequest request = device_request(slow_device_module(200), {"sm_90"});
  Expected<v1::CompileResponse> result = make_error(ErrorCode::k_unknown, "not run");
  // One attempt: the answer must come to the call in progress (a retry would only meet a daemon
  // that is gone, and hide what the call itself got). One connection for it and the polling.
  ClientOptions once(m_daemon->address(), std::chrono::seconds(120));
  once.max_attempts = 1;
  Client compiling(once);
  std::thread client([&] { result = compiling.compile(request); });
  // Wait until the compile is on a worker, then ask the daemon to stop.
  for (;;) {
    auto stats = compiling.stats();
    ASSERT_TRUE(stats) << stats.error().message;
    if (stats->running_jobs() > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(m_daemon->pid(), SIGTERM);
  client.join();
  auto answered = std::chrono::steady_clock::now();
  ASSERT_TRUE(result) << result.error().message;
  EXPECT_EQ(result->outcome(), v1::OUTCOME_MISS);
  // Once the call is answered, kcached exits: its stop does not linger (gRPC's library teardown
  // used to wait up to 10 s on a poll here, in about half of the runs).
  EXPECT_EQ(m_daemon->stop(), 0) << "kcached did not shut down cleanly on SIGTERM";
  EXPECT_LT(std::chrono::steady_clock::now() - answered, std::chrono::seconds(5))
      << "kcached lingered after the compile it finished";

  restart();  // asserts the clean exit
  auto again = m_client->compile(request);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->outcome(), v1::OUTCOME_HIT);
  EXPECT_EQ(again->images(0).data(), result->images(0).data());
}

}  // namespace
}  // namespace kcache::test

namespace kcache::test {
namespace {

TEST(DaemonConfig, ConfigFileSetsOptionsAndFlagsWin) {
  TempDir dir;
  write_file(dir.path() / "kcached.toml",
             "max-archs = 3\nmax-module-size = \"128K\"\nmax-size = \"3G\"\nlog-level = \"debug\"\n");
  auto daemon = DaemonProcess::start(dir.path() / "db", dir.path() / "kcached.log",
                                     {"--config", (dir.path() / "kcached.toml").string(), "--max-archs", "5"});
  Client client(ClientOptions{daemon->address()});
  auto caps = client.capabilities();
  ASSERT_TRUE(caps) << caps.error().message;
  EXPECT_EQ(caps->limits().max_archs(), 5u);                   // the flag wins over the file
  EXPECT_EQ(caps->limits().max_module_bytes(), 128u * 1024);  // from the file
  EXPECT_EQ(caps->limits().max_store_bytes(), 3ULL << 30);
  EXPECT_EQ(daemon->stop(), 0);
}

TEST(DaemonConfig, BadFlagsExitWithUsageErrors) {
  auto size = run_program({KCACHE_DAEMON_PATH, "--max-size", "12X"});
  EXPECT_EQ(size.exit_code, 2);
  EXPECT_NE((size.out + size.err).find("'12X' is not a size"), std::string::npos) << size.out << size.err;
  auto level = run_program({KCACHE_DAEMON_PATH, "--log-level", "loud"});
  EXPECT_EQ(level.exit_code, 2);
}

}  // namespace
}  // namespace kcache::test
