// Images the client's driver can load: a job that states an older driver gets PTX at an ISA that
// driver JITs (and this toolkit's ptxas still assembles), PTX in place of cubins it cannot load,
// and images of its own; a new enough driver shares everyone's images. Needs the CUDA toolkit
// (without ptxas the daemon emits LLVM's default ISA and makes no cubins: nothing to cap).
#include <regex>

#include "daemon_fixture.hpp"
#include "kcache/bundle.hpp"
#include "kcache/driver.hpp"

namespace kcache::test {
namespace {

// The `.version` of a PTX module as an ISA number (84 for 8.4); 0 when it has none.
int ptx_version_of(const std::string& ptx) {
  static const std::regex version(R"(\.version\s+([0-9]+)\.([0-9]))");
  std::smatch m;
  return std::regex_search(ptx, m, version) ? std::stoi(m[1]) * 10 + std::stoi(m[2]) : 0;
}

class DriverAware : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    auto caps = m_client->capabilities();
    ASSERT_TRUE(caps) << caps.error().message;
    m_daemon_isa = static_cast<int>(caps->ptx_isa_version());
    if (m_daemon_isa == 0) GTEST_SKIP() << "no CUDA toolkit (ptxas): the daemon has no PTX ISA to cap";
  }

  v1::CompileRequest saxpy(CudaVersion driver, std::vector<v1::ImageKind> emit = {v1::KIND_PTX},
                           std::vector<std::string> archs = {"sm_80"}) {
    // A module of the test's own: what it asserts of its keys' images holds on a shared daemon.
    v1::CompileRequest r = device_request(own_module(read_test_data("kernels/saxpy.ll")), archs, std::move(emit));
    r.set_driver_version(driver);
    return r;
  }

  // Assembles `ptx` with the toolkit's own ptxas for `arch`; its stderr when it fails.
  static std::string ptxas_error(const std::string& ptx, const std::string& arch, const TempDir& dir) {
    std::filesystem::path file = dir.path() / ("in." + arch + ".ptx");
    write_file(file, ptx);
    CommandResult r = run_program({std::string(KCACHE_CUDA_ROOT) + "/bin/ptxas", "-arch=" + arch, file.string(), "-o",
                                   (dir.path() / "out.cubin").string()});
    return r.exit_code == 0 ? "" : r.err + r.out;
  }

  int m_daemon_isa = 0;
};

TEST_F(DriverAware, AnOlderDriverGetsPtxItJitsWhichPtxasStillAssembles) {
  auto old = m_client->compile(saxpy(12040));
  ASSERT_TRUE(old) << old.error().message;
  ASSERT_EQ(old->images_size(), 1);
  int version = ptx_version_of(old->images(0).data());
  EXPECT_GT(version, 0);
  EXPECT_LE(version, 84) << "a CUDA 12.4 driver JITs PTX up to ISA 8.4";
  TempDir dir;
  EXPECT_EQ(ptxas_error(old->images(0).data(), "sm_80", dir), "");

  auto plain = m_client->compile(saxpy(0));
  ASSERT_TRUE(plain) << plain.error().message;
  EXPECT_EQ(ptx_version_of(plain->images(0).data()), m_daemon_isa) << "no driver stated: the daemon's own ISA";
  if (m_daemon_isa > 84) {
    EXPECT_NE(old->key(), plain->key()) << "the capped PTX is an image of its own";
  }
}

TEST_F(DriverAware, ADriverThatTakesTheDaemonsIsaSharesItsImages) {
  auto plain = m_client->compile(saxpy(0));
  ASSERT_TRUE(plain) << plain.error().message;
  auto future = m_client->compile(saxpy(99000));
  ASSERT_TRUE(future) << future.error().message;
  EXPECT_EQ(future->key(), plain->key());
  EXPECT_EQ(future->outcome(), v1::OUTCOME_HIT);
  EXPECT_EQ(ptx_version_of(future->images(0).data()), m_daemon_isa);
}

TEST_F(DriverAware, TwoDriversGetTwoImagesBothStoredAndEachServedItsOwn) {
  if (m_daemon_isa <= 84) GTEST_SKIP() << "this toolkit's PTX ISA is 8.4 or older: a 12.4 driver takes it";
  auto a = m_client->compile(saxpy(12040));
  auto b = m_client->compile(saxpy(13000));
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->key(), b->key());
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->entries(), 2u);
  for (int round = 0; round < 2; ++round) {
    auto again_a = m_client->compile(saxpy(12040));
    auto again_b = m_client->compile(saxpy(13000));
    ASSERT_TRUE(again_a && again_b);
    EXPECT_EQ(again_a->outcome(), v1::OUTCOME_HIT);
    EXPECT_EQ(again_b->outcome(), v1::OUTCOME_HIT);
    EXPECT_LE(ptx_version_of(again_a->images(0).data()), 84);
    EXPECT_EQ(ptx_version_of(again_b->images(0).data()), m_daemon_isa);
  }
}

TEST_F(DriverAware, CubinsADriverCannotLoadComeBackAsPtxForItToJit) {
  auto caps = m_client->capabilities();
  ASSERT_TRUE(caps);
  auto old = m_client->compile(saxpy(12040, {v1::KIND_PTX, v1::KIND_CUBIN}, {"sm_80", "sm_90"}));
  ASSERT_TRUE(old) << old.error().message;
  // The toolkit here is CUDA 13: its cubins need a CUDA 13 driver.
  ASSERT_EQ(old->images_size(), 2) << "one PTX per arch in place of PTX + cubin";
  for (const v1::Image& image : old->images()) {
    EXPECT_EQ(image.kind(), v1::KIND_PTX);
    EXPECT_TRUE(image.needs_jit());
    EXPECT_LE(ptx_version_of(image.data()), 84);
  }
  bool said = false;
  for (const std::string& d : old->diagnostics()) said = said || d.find("made no cubin for a driver of CUDA 12.4") != std::string::npos;
  EXPECT_TRUE(said) << "the reply says why there is no cubin";

  auto current = m_client->compile(saxpy(13000, {v1::KIND_CUBIN}));
  ASSERT_TRUE(current) << current.error().message;
  ASSERT_EQ(current->images_size(), 1);
  EXPECT_EQ(current->images(0).kind(), v1::KIND_CUBIN);
  EXPECT_FALSE(current->images(0).needs_jit());
}

TEST_F(DriverAware, ImpossibleDriversAreRefusedAndNothingIsStored) {
  auto malformed = m_client->compile(saxpy(12045));
  ASSERT_FALSE(malformed);
  EXPECT_EQ(malformed.error().code, ErrorCode::k_invalid_argument);
  EXPECT_NE(malformed.error().message.find("'12045' is not a CUDA driver version"), std::string::npos)
      << malformed.error().message;

  auto ancient = m_client->compile(saxpy(8000));
  ASSERT_FALSE(ancient);
  EXPECT_EQ(ancient.error().code, ErrorCode::k_failed_precondition);
  EXPECT_NE(ancient.error().message.find("CUDA 8.0"), std::string::npos) << ancient.error().message;

  // sm_90 needs PTX ISA 7.8 (CUDA 11.8); a CUDA 11.7 driver JITs up to 7.7.
  auto too_new_arch = m_client->compile(saxpy(11070, {v1::KIND_PTX}, {"sm_90"}));
  ASSERT_FALSE(too_new_arch);
  EXPECT_EQ(too_new_arch.error().code, ErrorCode::k_failed_precondition);
  EXPECT_NE(too_new_arch.error().message.find("sm_90 needs PTX ISA 7.8"), std::string::npos)
      << too_new_arch.error().message;

  v1::CompileRequest ptx_input = device_request(".version 8.0\n.target sm_80\n.address_size 64\n", {"sm_80"},
                                                {v1::KIND_CUBIN});
  ptx_input.set_format(v1::FORMAT_PTX);
  ptx_input.set_driver_version(12040);
  auto ptx_only = m_client->compile(ptx_input);
  ASSERT_FALSE(ptx_only);
  EXPECT_EQ(ptx_only.error().code, ErrorCode::k_failed_precondition) << ptx_only.error().message;

  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->entries(), 0u);
  auto fine = m_client->compile(saxpy(12040));
  ASSERT_TRUE(fine) << fine.error().message;
}

// Clang tags its bitcode with the newest PTX ISA it knows (+ptx88 for CUDA 13 headers), needed
// or not. For an older driver kcache emits at the driver's ISA, and ptxas decides whether the
// code really needed more.
TEST_F(DriverAware, ClangBitcodeIsEmittedAtTheDriversIsaUnlessItTrulyNeedsMore) {
  if (std::string(KCACHE_CUDA_CORPUS_DIR).empty()) GTEST_SKIP() << "no CUDA corpus: " << KCACHE_CUDA_CORPUS_SKIP_REASON;
  auto corpus = [](const std::string& stem, const std::string& arch) {
    return read_file(std::filesystem::path(KCACHE_CUDA_CORPUS_DIR) / (stem + "." + arch + ".bc"));
  };
  v1::CompileRequest shuffle = device_request(corpus("warp_shuffle", "sm_80"), {"sm_80"});
  shuffle.set_format(v1::FORMAT_LLVM_BITCODE);
  shuffle.set_driver_version(12040);
  auto fits = m_client->compile(shuffle);
  ASSERT_TRUE(fits) << fits.error().message;
  EXPECT_EQ(ptx_version_of(fits->images(0).data()), 84);

  // elect.sync, st.async and red.async need PTX ISA 8.0/8.1 on sm_90: a CUDA 12.0 driver (8.0) cannot take it.
  v1::CompileRequest newer = device_request(corpus("ptx_isa_newer_sm90", "sm_90"), {"sm_90"});
  newer.set_format(v1::FORMAT_LLVM_BITCODE);
  newer.set_driver_version(12000);
  auto refused = m_client->compile(newer);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::k_failed_precondition) << refused.error().message;
  EXPECT_NE(refused.error().message.find("the client's driver JITs"), std::string::npos) << refused.error().message;
}

// Fetch over gRPC and over the HTTP API never returns an image the stated driver rejects: for the
// images of a driverless compile, a CUDA 12.4 driver gets NOT_FOUND saying why; for those of a
// compile for it, its own PTX.
TEST_F(DriverAware, FetchReturnsOnlyImagesTheStatedDriverLoads) {
  if (m_daemon_isa <= 84) GTEST_SKIP() << "this toolkit's PTX ISA is 8.4 or older: a 12.4 driver takes it";
  auto current = m_client->compile(saxpy(0, {v1::KIND_PTX, v1::KIND_CUBIN}));
  ASSERT_TRUE(current) << current.error().message;
  auto older = m_client->compile(saxpy(12040, {v1::KIND_PTX, v1::KIND_CUBIN}));
  ASSERT_TRUE(older) << older.error().message;

  ClientOptions grpc_only(m_daemon->address());
  grpc_only.http_fetch = false;
  Client over_grpc(grpc_only);
  for (Client* client : {m_client.get(), &over_grpc}) {
    SCOPED_TRACE(client == m_client.get() ? "over HTTP" : "over gRPC");
    v1::FetchRequest fetch;
    fetch.set_key(current->key());
    fetch.set_arch("sm_80");
    auto any = client->fetch(fetch);
    ASSERT_TRUE(any) << any.error().message;
    EXPECT_EQ(any->image.kind(), v1::KIND_CUBIN) << "no driver stated: the best image";

    fetch.set_driver_version(12040);
    auto refused = client->fetch(fetch);
    ASSERT_FALSE(refused) << "a CUDA 12.4 driver loads neither PTX " << ptx_isa_name(m_daemon_isa)
                          << " nor a CUDA 13 cubin";
    EXPECT_EQ(refused.error().code, ErrorCode::k_not_found);
    EXPECT_NE(refused.error().message.find("that a driver of CUDA 12.4 loads"), std::string::npos)
        << refused.error().message;

    fetch.set_driver_version(13000);
    auto new_driver = client->fetch(fetch);
    ASSERT_TRUE(new_driver) << new_driver.error().message;
    EXPECT_EQ(new_driver->image.kind(), v1::KIND_CUBIN);

    fetch.set_key(older->key());
    fetch.set_driver_version(12040);
    auto own = client->fetch(fetch);
    ASSERT_TRUE(own) << own.error().message;
    EXPECT_EQ(own->image.kind(), v1::KIND_PTX);
    EXPECT_TRUE(own->image.needs_jit());
    EXPECT_LE(ptx_version_of(own->data), 84);

    fetch.set_driver_version(12045);
    auto malformed = client->fetch(fetch);
    ASSERT_FALSE(malformed);
    EXPECT_EQ(malformed.error().code, ErrorCode::k_invalid_argument) << malformed.error().message;
  }

  // fetch_or_compile for an older driver: a miss compiles the variant it loads.
  v1::CompileRequest again = saxpy(12080, {v1::KIND_CUBIN}, {});
  auto loaded = m_client->fetch_or_compile(again, "sm_80");
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ(loaded->image.kind(), v1::KIND_PTX);
  EXPECT_LE(ptx_version_of(loaded->data), 87);
}

// Bundles know the driver too: `precompile --driver` makes images that driver loads, and
// `bundle-fetch --driver` never serves one it rejects.
TEST_F(DriverAware, BundlesArePrecompiledAndServedForADriver) {
  if (m_daemon_isa <= 84) GTEST_SKIP() << "this toolkit's PTX ISA is 8.4 or older: a 12.4 driver takes it";
  TempDir dir;
  write_file(dir.path() / "saxpy.ll", own_module(read_test_data("kernels/saxpy.ll")));
  write_file(dir.path() / "m.json",
             R"({"archs": ["sm_80"], "modules": [{"path": "saxpy.ll", "emit": ["ptx", "cubin"]}]})");
  auto precompile = [&](const std::string& out, std::vector<std::string> extra) {
    std::vector<std::string> args = {"precompile", (dir.path() / "m.json").string(), "--out", (dir.path() / out).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args, m_daemon->address());
  };
  auto fetch = [&](const std::string& bundle, const std::string& key, std::vector<std::string> extra) {
    std::vector<std::string> args = {"bundle-fetch", (dir.path() / bundle).string(), key, "--arch", "sm_80", "-o",
                                     (dir.path() / (bundle + ".out")).string()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_cli(args, "");
  };

  ASSERT_EQ(precompile("current", {}).exit_code, 0);
  auto current = Bundle::open(dir.path() / "current");
  ASSERT_TRUE(current) << current.error().message;
  EXPECT_EQ(current->index().cuda_version, static_cast<CudaVersion>(m_client->capabilities()->cuda_version()));
  std::string key = current->index().entries.at(0).key;
  auto any = fetch("current", key, {});
  ASSERT_EQ(any.exit_code, 0) << any.err;
  EXPECT_NE(any.out.find("cubin"), std::string::npos) << any.out;
  auto refused = fetch("current", key, {"--driver", "12.4"});
  EXPECT_EQ(refused.exit_code, 4) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("precompile it with --driver 12.4"), std::string::npos) << refused.err;
  auto new_driver = fetch("current", key, {"--driver", "13.0"});
  EXPECT_EQ(new_driver.exit_code, 0) << new_driver.err;

  auto made = precompile("old", {"--driver", "12.4"});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto old = Bundle::open(dir.path() / "old");
  ASSERT_TRUE(old) << old.error().message;
  EXPECT_EQ(old->index().driver_version, 12040u);
  std::string old_key = old->index().entries.at(0).key;
  EXPECT_NE(old_key, key);
  auto served = fetch("old", old_key, {"--driver", "12.4"});
  ASSERT_EQ(served.exit_code, 0) << served.err;
  EXPECT_NE(served.out.find("needs JIT"), std::string::npos) << served.out;
  EXPECT_LE(ptx_version_of(read_file(dir.path() / "old.out")), 84);
  auto direct = old->fetch(old_key, "sm_80", std::nullopt, 12040);
  ASSERT_TRUE(direct) << direct.error().message;
  EXPECT_EQ(direct->image.id.kind, ImageKind::ptx);

  EXPECT_EQ(fetch("old", old_key, {"--driver", "12.45"}).exit_code, 2);
  EXPECT_EQ(precompile("bad", {"--driver", "twelve"}).exit_code, 2);
  // A hand-edited index with an impossible toolkit version is a bad bundle.
  std::string index = read_file(dir.path() / "old" / "index.json");
  const std::string stated = "\"driver_version\": 12040";
  ASSERT_NE(index.find(stated), std::string::npos) << index;
  index.replace(index.find(stated), stated.size(), "\"driver_version\": 12345");
  write_file(dir.path() / "old" / "index.json", index);
  auto bad_index = fetch("old", old_key, {});
  EXPECT_EQ(bad_index.exit_code, 3) << bad_index.err;
  EXPECT_NE(bad_index.err.find("driver_version"), std::string::npos) << bad_index.err;
}

TEST_F(DriverAware, TheCliTakesDriverAndRefusesAMalformedOne) {
  TempDir dir;
  std::filesystem::path out = dir.path() / "saxpy.ptx";
  CommandResult ok = run_program({KCACHE_CLI_PATH, "--server", m_daemon->address(), "compile",
                                  (std::filesystem::path(KCACHE_TEST_DATA_DIR) / "kernels/saxpy.ll").string(), "--arch",
                                  "sm_80", "--driver", "12.4", "-o", out.string()});
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_LE(ptx_version_of(read_file(out)), 84);
  CommandResult bad = run_program({KCACHE_CLI_PATH, "--server", m_daemon->address(), "compile",
                                   (std::filesystem::path(KCACHE_TEST_DATA_DIR) / "kernels/saxpy.ll").string(),
                                   "--arch", "sm_80", "--driver", "12.45"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--driver: '12.45' is not a CUDA driver version"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace kcache::test
