// Precompiled bundles: `kcache precompile` over 20 modules x 2 archs through the daemon, then
// `kcache bundle-fetch` serving from the bundle with the daemon gone; a corrupt file is refused.
#include <nlohmann/json.hpp>

#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

using json = nlohmann::json;
using Bundles = DaemonTest;

TEST_F(Bundles, PrecompileTwentyModulesThenServeWithoutADaemon) {
  const bool cubin = !ptxas_path().empty();
  json modules = json::array();
  std::string saxpy = read_test_data("kernels/saxpy.ll");
  for (int i = 0; i < 20; ++i) {
    std::string name = "m" + std::to_string(i) + ".ll";
    // Twenty distinct modules: saxpy with its kernel renamed.
    std::string text = saxpy;
    text.replace(text.find("@saxpy("), 7, "@saxpy_" + std::to_string(i) + "(");
    write_file(m_dir.path() / name, text);
    modules.push_back({{"path", name}, {"emit", cubin ? json{"ptx", "cubin"} : json{"ptx"}}, {"opt_level", 3}});
  }
  write_file(m_dir.path() / "manifest.json", json{{"archs", {"sm_80", "sm_90"}}, {"modules", modules}}.dump());
  std::filesystem::path out = m_dir.path() / "bundle";
  auto run = run_cli({"--json", "precompile", (m_dir.path() / "manifest.json").string(), "--out", out.string()},
                     m_daemon->address());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  json summary = json::parse(run.out);
  EXPECT_EQ(summary["modules"], 20);
  EXPECT_EQ(summary["images"], cubin ? 80 : 40);
  EXPECT_NE(run.err.find("precompiled 20/20"), std::string::npos) << run.err;  // plain progress lines off a terminal

  ASSERT_EQ(m_daemon->stop(), 0);  // serve from the bundle alone
  json index = json::parse(read_file(out / "index.json"));
  ASSERT_EQ(index["entries"].size(), 20u);
  for (const json& entry : index["entries"]) {
    std::string key = entry["key"];
    std::filesystem::path file = m_dir.path() / "fetched";
    auto fetched = run_cli({"--json", "bundle-fetch", out.string(), key, "--arch", "sm_86", "-o", file.string()}, "");
    ASSERT_EQ(fetched.exit_code, 0) << fetched.err;
    json f = json::parse(fetched.out)["images"][0];
    EXPECT_EQ(f["arch"], "sm_80");  // sm_86 runs sm_80 code
    EXPECT_EQ(f["kind"], cubin ? "cubin" : "ptx");
    EXPECT_EQ(sha256_hex(read_file(file)), f["sha256"].get<std::string>());
  }

  // The C API serves from the bundle too.
  auto from_c = run_program({KCACHE_CAPI_TEST_PATH, "bundle", out.string(), index["entries"][1]["key"]});
  EXPECT_EQ(from_c.exit_code, 0) << from_c.err;
  EXPECT_EQ(from_c.out, "capi bundle ok\n");

  std::string victim = index["entries"][0]["images"][0]["file"];
  std::string bytes = read_file(out / victim);
  bytes[bytes.size() / 2] ^= 0x20;
  write_file(out / victim, bytes);
  std::string arch = index["entries"][0]["images"][0]["arch"];
  std::string kind = index["entries"][0]["images"][0]["kind"];
  auto refused = run_cli({"bundle-fetch", out.string(), index["entries"][0]["key"], "--arch", arch, "--kind", kind,
                          "-o", (m_dir.path() / "x").string()},
                         "");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("does not match the bundle index"), std::string::npos) << refused.err;
}

TEST_F(Bundles, AFailedModuleFailsThePrecompileClearly) {
  write_file(m_dir.path() / "bad.ll", "not IR\n");
  write_file(m_dir.path() / "manifest.json", json{{"archs", {"sm_90"}}, {"modules", {{{"path", "bad.ll"}}}}}.dump());
  auto run = run_cli({"precompile", (m_dir.path() / "manifest.json").string(), "--out", (m_dir.path() / "b").string()},
                     m_daemon->address());
  EXPECT_EQ(run.exit_code, 3);
  EXPECT_NE(run.err.find("bad.ll: INVALID_ARGUMENT"), std::string::npos) << run.err;
  EXPECT_FALSE(std::filesystem::exists(m_dir.path() / "b" / "index.json"));
}

// A hostile index.json naming a file outside the bundle (its digest set to match) is refused
// when the bundle is opened; so is a symlink inside the bundle that leads out of it.
TEST(BundleIndex, FilesOutsideTheBundleAreRefused) {
  TempDir dir;
  std::filesystem::path bundle = dir.path() / "bundle";
  std::filesystem::create_directories(bundle / "images");
  std::string secret = "not an image\n";
  write_file(dir.path() / "secret", secret);
  std::string key(64, 'a');
  auto index = [&](const std::string& file) {
    json image = {{"arch", "sm_80"}, {"kind", "ptx"}, {"size", secret.size()}, {"sha256", sha256_hex(secret)}, {"file", file}};
    json doc = {{"format", "kcache-bundle-1"}, {"fingerprint", ""},
                {"entries", json::array({json{{"module", "m.ll"}, {"key", key}, {"side", "device"}, {"images", json::array({image})}}})}};
    write_file(bundle / "index.json", doc.dump());
  };
  for (const std::string& file : {std::string("../secret"), std::string("images/../../secret"), (dir.path() / "secret").string(),
                                  std::string("images/"), std::string("other/x.ptx")}) {
    index(file);
    auto r = run_cli({"bundle-fetch", bundle.string(), key, "--arch", "sm_80", "-o", (dir.path() / "out").string()}, "");
    EXPECT_EQ(r.exit_code, 3) << file << ": " << r.err;
    EXPECT_NE(r.err.find("outside the bundle"), std::string::npos) << file << ": " << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir.path() / "out")) << file;
  }
  std::filesystem::create_symlink(dir.path() / "secret", bundle / "images" / "link.ptx");
  index("images/link.ptx");
  auto linked = run_cli({"bundle-fetch", bundle.string(), key, "--arch", "sm_80", "-o", (dir.path() / "out").string()}, "");
  EXPECT_EQ(linked.exit_code, 3) << linked.err;
  EXPECT_NE(linked.err.find("resolves outside the bundle"), std::string::npos) << linked.err;
}

}  // namespace
}  // namespace kcache::test
