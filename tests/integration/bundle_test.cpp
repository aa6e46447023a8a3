// Precompiled bundles: `kcache precompile` over 20 modules x 2 archs through the daemon, then
// `kcache bundle-fetch` serving from the bundle with the daemon gone; a corrupt file is refused.
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include "daemon_fixture.hpp"
#include "kcache/bundle.hpp"
#include "manifest.hpp"

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
  // Each entry fetched by a CLI process of its own; under the sanitizers every fourth (a CLI start
  // there is 0.25 CPU-s, and each fetch runs the same code).
  for (std::size_t i = 0; i < index["entries"].size(); i += k_asan_build ? 4 : 1) {
    const json& entry = index["entries"][i];
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
  EXPECT_EQ(refused.exit_code, 3);  // a bad bundle, as docs/cli.md's table says
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

// The files of a bundle are read as regular files, an image never past the size its index
// records: an index or image that is a FIFO, an index that is /dev/zero, or an image larger than
// the index says is refused at once (exit 3); a FIFO once hung bundle-fetch, and a 4 GiB image
// was read whole (6 GB) before it was refused (exit 1).
TEST(BundleFiles, FifosDevicesAndImagesLargerThanTheIndexSaysAreRefusedUnread) {
  TempDir dir;
  std::filesystem::path bundle = dir.path() / "bundle", index = bundle / "index.json";
  std::filesystem::create_directories(bundle / "images");
  const std::string ptx = "// ptx\n", key(64, 'a'), out = (dir.path() / "out").string();
  json image = {{"arch", "sm_80"}, {"kind", "ptx"}, {"size", ptx.size()}, {"sha256", sha256_hex(ptx)},
                {"file", "images/k.ptx"}};
  const std::string doc = json{{"format", "kcache-bundle-1"}, {"fingerprint", ""},
                               {"entries", json::array({json{{"key", key}, {"images", json::array({image})}}})}}
                              .dump();
  const std::vector<std::string> fetch = {"bundle-fetch", bundle.string(), key, "--arch", "sm_80", "-o", out};

  ASSERT_EQ(::mkfifo(index.c_str(), 0600), 0);
  expect_quick_refusal(fetch, "", 3, "cannot read " + index.string() + ": it is a FIFO, not a regular file");
  std::filesystem::remove(index);
  std::filesystem::create_symlink("/dev/zero", index);
  expect_quick_refusal(fetch, "", 3,
                       "cannot read " + index.string() + ": it is a character device, not a regular file");
  std::filesystem::remove(index);

  write_file(index, doc);
  std::filesystem::path file = bundle / "images" / "k.ptx";
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);
  expect_quick_refusal(fetch, "", 3, "cannot read " + file.string() + ": it is a FIFO, not a regular file");
  std::filesystem::remove(file);
  write_file(file, ptx);
  std::filesystem::resize_file(file, 1ULL << 30);  // sparse: 1 GiB that takes no room
  expect_quick_refusal(fetch, "", 3,
                       "cannot read " + file.string() + ": it holds 1073741824 bytes, more than the " +
                           std::to_string(ptx.size()) + " allowed by the size the bundle index records");
  EXPECT_FALSE(std::filesystem::exists(out));
  write_file(file, ptx);
  ASSERT_EQ(run_cli(fetch, "").exit_code, 0);  // the same bundle, whole again
  EXPECT_EQ(read_file(out), ptx);
}

// Every field of a manifest is checked, and the first bad one is named by its position and what
// it holds (a string opt_level once aborted the CLI on an uncaught JSON type_error).
TEST(Manifest, EachBadFieldIsNamedWithItsPosition) {
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {R"({"modules": [{"path": "a.ll"}, {"path": "b.ll"}, {"path": "c.ll", "opt_level": "3"}]})",
       R"(manifest modules[2].opt_level: expected an integer 0-3, got the string "3")"},
      {R"({"modules": [{"path": "a.ll", "opt_level": 4}]})", "modules[0].opt_level: expected an integer 0-3, got the number 4"},
      {R"({"modules": [{"path": "a.ll", "opt_level": -1}]})", "modules[0].opt_level: expected an integer 0-3, got the number -1"},
      {R"({"modules": [{"path": "a.ll", "opt_level": 2.5}]})", "modules[0].opt_level: expected an integer 0-3, got the number 2.5"},
      {R"({"modules": [{"path": "a.ll", "opt_level": 18446744073709551616}]})", "modules[0].opt_level: expected an integer 0-3"},
      {R"({"modules": [{"path": "a.ll", "side": "gpu"}]})",
       R"(manifest modules[0].side: expected one of "device", "host", got the string "gpu")"},
      {R"({"modules": [{"path": "a.ll", "side": 1}]})", R"(modules[0].side: expected one of "device", "host", got the number 1)"},
      {R"({"modules": [{"path": "a.ll", "format": "cuda"}]})", R"(modules[0].format: expected one of "bc", "ll", "ptx", "cu", got the string "cuda")"},
      {R"({"modules": [{"path": "a.ll", "emit": "ptx"}]})", R"(modules[0].emit: expected an array, got the string "ptx")"},
      {R"({"modules": [{"path": "a.ll", "emit": ["ptx", "elf"]}]})", R"(modules[0].emit[1]: expected one of "ptx", "cubin", "ltoir", "hsaco", "amdgcn", "obj", got the string "elf")"},
      {R"({"modules": [{"path": "a.ll", "emit": ["obj"]}]})", R"(modules[0].emit[0]: "obj" is a host image kind, but the module's side is device)"},
      {R"({"modules": [{"path": "a.ll", "side": "host", "emit": ["cubin"]}]})", R"(modules[0].emit[0]: "cubin" is a device image kind)"},
      {R"({"modules": [{"path": "a.ll", "debug": "yes"}]})", R"(modules[0].debug: expected true or false, got the string "yes")"},
      {R"({"modules": [{"path": "a.ll", "lineinfo": 1}]})", "modules[0].lineinfo: expected true or false, got the number 1"},
      {R"({"modules": [{"path": "a.ll", "fast_math": null}]})", "modules[0].fast_math: expected true or false, got null"},
      {R"({"modules": [{"path": "a.ll", "link": ["b.ll", 3]}]})", "modules[0].link[1]: expected a non-empty string, got the number 3"},
      {R"({"modules": [{"path": "a.ll", "link": "b.ll"}]})", R"(modules[0].link: expected an array, got the string "b.ll")"},
      {R"({"modules": [{"path": "a.ll", "defines": ["N=4"]}]})",
       R"(modules[0].defines: is for CUDA C++ modules (format "cu", or a .cu path))"},
      {R"({"modules": [{"path": "a.cu", "std": "c++98"}]})",
       R"(modules[0].std: expected one of "c++03", "c++11", "c++14", "c++17", "c++20", got the string "c++98")"},
      {R"({"modules": [{"path": "a.cu", "include_dirs": "inc"}]})", R"(modules[0].include_dirs: expected an array, got the string "inc")"},
      {R"({"modules": [{"path": "a.ll", "format": "cu", "name_expressions": [7]}]})",
       "modules[0].name_expressions[0]: expected a non-empty string, got the number 7"},
      {R"({"modules": [{"path": "a.ll", "entry_points": [""]}]})", R"(modules[0].entry_points[0]: expected a non-empty string, got the string "")"},
      {R"({"modules": [{"path": "a.ll", "host_runtime": "allow"}]})", R"(modules[0].host_runtime: expected one of "reject", "stub", got the string "allow")"},
      {R"({"modules": [{"path": "a.ll", "target": 5}]})", "modules[0].target: expected a string, got the number 5"},
      {R"({"modules": [{"path": "a.ll", "cpu": ["x"]}]})", "modules[0].cpu: expected a string, got an array"},
      {R"({"modules": [{"path": "a.ll", "opt-level": 3}]})", R"(modules[0]."opt-level": unknown field (known: path, link,)"},
      {R"({"modules": [{"path": ""}]})", R"(modules[0].path: expected a non-empty string, got the string "")"},
      {R"({"modules": [{"path": "a\u0000b"}]})", "modules[0].path: contains a NUL byte"},
      {R"({"modules": [{"emit": ["ptx"]}]})", "manifest modules[0].path: missing (it is required)"},
      {R"({"modules": ["a.ll"]})", R"(modules[0]: expected an object, got the string "a.ll")"},
      {R"({"modules": {"path": "a.ll"}})", "manifest modules: expected an array, got an object"},
      {R"({"modules": []})", "manifest modules: empty"},
      {R"({"archs": ["sm_90"]})", "manifest modules: missing (it is required)"},
      {R"({"archs": ["sm_90", "x86"], "modules": [{"path": "a.ll"}]})", R"(manifest archs[1]: expected an SM arch such as "sm_90" or an AMD target ID such as "gfx90a", got the string "x86")"},
      {R"({"archs": ["gfx90a:xnack-", "gfx1030:xnack+"], "modules": [{"path": "a.ll"}]})", R"(manifest archs[1]: expected an SM arch such as "sm_90" or an AMD target ID such as "gfx90a", got the string "gfx1030:xnack+")"},
      {R"({"archs": "sm_90", "modules": [{"path": "a.ll"}]})", R"(manifest archs: expected an array, got the string "sm_90")"},
      {R"({"arch": ["sm_90"], "modules": [{"path": "a.ll"}]})", R"(manifest "arch": unknown field (known: archs, modules))"},
      {R"([{"path": "a.ll"}])", "manifest the document: expected an object, got an array"},
      {R"({"modules": [{"path": "a.ll"})", "manifest is not valid JSON: "},
      {"", "manifest is not valid JSON: "},
  };
  for (const Case& c : cases) {
    auto m = parse_manifest(c.text, ManifestSyntax::json);
    ASSERT_FALSE(m) << c.text;
    EXPECT_EQ(m.error().code, ErrorCode::k_invalid_argument) << c.text;
    EXPECT_NE(m.error().message.find(c.message), std::string::npos) << c.text << "\n  got: " << m.error().message;
  }
  auto good = parse_manifest(R"({"archs": ["sm_80", "sm_90a"], "modules": [
      {"path": "k.ll", "link": ["s.bc"], "format": "ll", "opt_level": 0, "emit": ["ptx", "cubin"], "entry_points": ["k"],
       "debug": true, "lineinfo": true, "fast_math": true, "target": "nvptx64-nvidia-cuda"},
      {"path": "h.ll", "side": "host", "cpu": "x86-64-v3", "host_runtime": "stub", "emit": ["obj"]}]})",
                             ManifestSyntax::json);
  ASSERT_TRUE(good) << good.error().message;
  ASSERT_EQ(good->modules.size(), 2u);
  EXPECT_EQ(good->archs, (std::vector<std::string>{"sm_80", "sm_90a"}));
  EXPECT_EQ(good->modules[0].link, std::vector<std::string>{"s.bc"});
  EXPECT_EQ(good->modules[0].spec.options.opt_level, 0u);
  EXPECT_EQ(good->modules[0].emit, (std::vector<ImageKind>{ImageKind::ptx, ImageKind::cubin}));
  EXPECT_EQ(good->modules[0].format, InputFormat::llvm_text);
  EXPECT_EQ(good->modules[0].spec.options.entry_points, std::vector<std::string>{"k"});
  EXPECT_TRUE(good->modules[0].spec.options.debug_info && good->modules[0].spec.options.lineinfo &&
              good->modules[0].spec.options.fast_math);
  EXPECT_EQ(good->modules[0].spec.target, "nvptx64-nvidia-cuda");
  EXPECT_EQ(good->modules[1].spec.side, Side::host);
  EXPECT_EQ(good->modules[1].spec.options.cpu, "x86-64-v3");
  EXPECT_EQ(good->modules[1].spec.options.guard, HostGuard::stub);
  EXPECT_EQ(good->modules[1].spec.options.opt_level, 2u) << "the default";
}

// A manifest's module is a job spec: a CUDA C++ one (format cu, or a .cu path) carries the NVRTC
// options its fields make, in the order `kcache compile --std -X -D -U` gives them.
TEST(Manifest, ACudaModuleIsTheJobItsFlagsWouldMake) {
  auto m = parse_manifest(R"({"modules": [
      {"path": "k.cu", "std": "c++17", "defines": ["N=4", "W"], "undefines": ["M"], "nvrtc_options": ["-lineinfo"],
       "name_expressions": ["f<int>"], "include_dirs": ["inc"]},
      {"path": "k.src", "format": "cu", "defines": ["N=4"]},
      {"path": "k.ll"}]})",
                          ManifestSyntax::json);
  ASSERT_TRUE(m) << m.error().message;
  const JobSpec& cu = m->modules[0].spec;
  EXPECT_EQ(cu.source.nvrtc_options, (std::vector<std::string>{"--std=c++17", "-lineinfo", "-DN=4", "-DW", "-UM"}));
  EXPECT_EQ(cu.source.name_expressions, std::vector<std::string>{"f<int>"});
  EXPECT_EQ(m->modules[0].include_dirs, std::vector<std::string>{"inc"});
  EXPECT_EQ(m->modules[0].format, std::nullopt) << "a .cu path is CUDA C++ without saying so";
  EXPECT_EQ(m->modules[1].spec.source.nvrtc_options, std::vector<std::string>{"-DN=4"});
  EXPECT_TRUE(m->modules[2].spec.source.nvrtc_options.empty());
}

// A TOML manifest has the same schema, read by the same checks.
TEST(Manifest, TomlIsTheSameSchemaWithTheSameChecks) {
  auto toml = parse_manifest(R"(archs = ["sm_80", "sm_90a"]

[[modules]]
path = "k.ll"
link = ["s.bc"]
format = "ll"
opt_level = 0
emit = ["ptx", "cubin"]
entry_points = ["k"]
debug = true

[[modules]]
path = "h.ll"
side = "host"
host_runtime = "stub"
)",
                             ManifestSyntax::toml);
  ASSERT_TRUE(toml) << toml.error().message;
  auto json_manifest = parse_manifest(R"({"archs": ["sm_80", "sm_90a"], "modules": [
      {"path": "k.ll", "link": ["s.bc"], "format": "ll", "opt_level": 0, "emit": ["ptx", "cubin"], "entry_points": ["k"],
       "debug": true},
      {"path": "h.ll", "side": "host", "host_runtime": "stub"}]})",
                                      ManifestSyntax::json);
  ASSERT_TRUE(json_manifest);
  EXPECT_EQ(toml->archs, json_manifest->archs);
  ASSERT_EQ(toml->modules.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const ManifestModule &t = toml->modules[i], &j = json_manifest->modules[i];
    EXPECT_EQ(t.path, j.path);
    EXPECT_EQ(t.link, j.link);
    EXPECT_EQ(t.format, j.format);
    EXPECT_EQ(t.emit, j.emit);
    EXPECT_EQ(t.spec.side, j.spec.side);
    EXPECT_EQ(t.spec.options.opt_level, j.spec.options.opt_level);
    EXPECT_EQ(t.spec.options.entry_points, j.spec.options.entry_points);
    EXPECT_EQ(t.spec.options.debug_info, j.spec.options.debug_info);
    EXPECT_EQ(t.spec.options.guard, j.spec.options.guard);
  }

  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {"[[modules]]\npath = \"a.ll\"\n[[modules]]\npath = \"b.ll\"\nopt_level = \"3\"\n",
       R"(manifest modules[1].opt_level: expected an integer 0-3, got the string "3")"},
      {"[[modules]]\npath = \"a.ll\"\nopt_level = 3.0\n", "modules[0].opt_level: expected an integer 0-3, got the number 3.0"},
      {"[[modules]]\npath = \"a.ll\"\nside = \"gpu\"\n", R"(modules[0].side: expected one of "device", "host", got the string "gpu")"},
      {"[[modules]]\npath = 1979-05-27\n", "manifest modules[0].path: a TOML date or time, which no manifest field takes"},
      {"[[modules]]\npath = \"a.ll\"\nopt-level = 3\n", R"(modules[0]."opt-level": unknown field)"},
      {"archs = [\"sm_90\"]\n", "manifest modules: missing (it is required)"},
      {"[[modules]\npath = \"a.ll\"\n", "manifest is not valid TOML: line 1"},
      {"[modules]\npath = \"a.ll\"\n", "manifest modules: expected an array, got an object"},
      {"[[modules]]\npath = \"mod\xc3\xa8le.ll\"\n", "manifest is not ASCII at line 2, column 12"},
      {"[[modules]]\npath = \"a.ll\"\n\xca\xa6\n", "manifest is not ASCII at line 3, column 1"},
      {"[[[1]]]\n", "manifest is not valid TOML"},  // toml++ 3.3 once broke its own assumption here
  };
  for (const Case& c : cases) {
    auto m = parse_manifest(c.text, ManifestSyntax::toml);
    ASSERT_FALSE(m) << c.text;
    EXPECT_NE(m.error().message.find(c.message), std::string::npos) << c.text << "\n  got: " << m.error().message;
  }
  auto escaped = parse_manifest("[[modules]]\npath = \"mod\\u00e8le.ll\"\n", ManifestSyntax::toml);
  ASSERT_TRUE(escaped) << escaped.error().message;
  EXPECT_EQ(escaped->modules[0].path, "mod\xc3\xa8le.ll");
  EXPECT_EQ(manifest_syntax_of("dir/m.toml"), ManifestSyntax::toml);
  EXPECT_EQ(manifest_syntax_of("dir/m.json"), ManifestSyntax::json);
}

// Through the CLI: a bad manifest is a usage error (exit 2) naming the file and the field, with
// nothing compiled and no bundle folder made; a TOML manifest makes the same bundle as JSON.
TEST_F(Bundles, ManifestsAreCheckedBeforeAnythingAndTomlWorksLikeJson) {
  write_file(m_dir.path() / "saxpy.ll", own_module(read_test_data("kernels/saxpy.ll")));
  std::filesystem::path bad = m_dir.path() / "bad.json", out = m_dir.path() / "bundle";
  for (const char* module : {R"({"path": "saxpy.ll", "opt_level": "3"})", R"({"path": "saxpy.ll", "side": "gpu"})"}) {
    write_file(bad, std::string(R"({"archs": ["sm_90"], "modules": [)") + module + "]}");
    auto r = run_cli({"precompile", bad.string(), "--out", out.string()}, m_daemon->address());
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("kcache: " + bad.string() + ": manifest modules[0]."), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
  write_file(m_dir.path() / "bad.toml", "[[modules]]\npath = \"saxpy.ll\"\nopt_level = \"3\"\n");
  auto toml_bad = run_cli({"--json", "precompile", (m_dir.path() / "bad.toml").string(), "--out", out.string()},
                          m_daemon->address());
  EXPECT_EQ(toml_bad.exit_code, 2);
  EXPECT_NE(json::parse(toml_bad.out)["error"].get<std::string>().find(
                R"(manifest modules[0].opt_level: expected an integer 0-3, got the string "3")"),
            std::string::npos)
      << toml_bad.out;

  write_file(m_dir.path() / "m.toml", "archs = [\"sm_80\", \"sm_90\"]\n\n[[modules]]\npath = \"saxpy.ll\"\nopt_level = 3\n");
  write_file(m_dir.path() / "m.json", R"({"archs": ["sm_80", "sm_90"], "modules": [{"path": "saxpy.ll", "opt_level": 3}]})");
  auto from_toml = run_cli({"precompile", (m_dir.path() / "m.toml").string(), "--out", (m_dir.path() / "t").string()},
                           m_daemon->address());
  ASSERT_EQ(from_toml.exit_code, 0) << from_toml.err;
  auto from_json = run_cli({"precompile", (m_dir.path() / "m.json").string(), "--out", (m_dir.path() / "j").string()},
                           m_daemon->address());
  ASSERT_EQ(from_json.exit_code, 0) << from_json.err;
  EXPECT_EQ(read_file(m_dir.path() / "t" / "index.json"), read_file(m_dir.path() / "j" / "index.json"));
}

// A bundle index is checked field by field when opened; a bad one is exit 3 naming the field.
TEST(BundleIndex, EachBadFieldIsNamedWithItsPosition) {
  const std::string key(64, 'a'), digest(64, 'b');
  auto index_with = [&](const std::string& entry_fields, const std::string& image_fields) {
    return R"({"format": "kcache-bundle-1", "fingerprint": ")" + digest + R"(", "entries": [{"key": ")" + key + "\"" +
           entry_fields + R"(, "images": [{"arch": "sm_80", "kind": "ptx", "size": 5, "sha256": ")" + digest +
           R"(", "file": "images/x.ptx")" + image_fields + "}]}]}";
  };
  ASSERT_TRUE(parse_bundle_index(index_with("", ""))) << parse_bundle_index(index_with("", "")).error().message;
  ASSERT_TRUE(parse_bundle_index(index_with(R"(, "future_field": [1])", R"(, "kernels": ["k"])")))
      << "fields a later version may add are ignored";
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {index_with(R"(, "side": "gpu")", ""), R"(bundle index entries[0].side: expected one of "device", "host", got the string "gpu")"},
      {index_with("", R"(, "size": "5")"), R"(entries[0].images[0].size: expected an integer 0-9223372036854775807, got the string "5")"},
      {index_with("", R"(, "size": -1)"), "entries[0].images[0].size: expected an integer"},
      {index_with("", R"(, "kind": "elf")"), R"(entries[0].images[0].kind: expected one of "ptx", "cubin", "ltoir", "hsaco", "amdgcn", "obj", got the string "elf")"},
      {index_with("", R"(, "lowered_names": ["f"])"), R"(entries[0].images[0].lowered_names: expected an object, got an array)"},
      {index_with("", R"(, "lowered_names": {"f<int>": 3})"),
       R"(entries[0].images[0].lowered_names.f<int>: expected a non-empty string, got the number 3)"},
      {index_with("", R"(, "kind": "obj")"), R"(entries[0].images[0].kind: "obj" is not a device image kind)"},
      {index_with("", R"(, "arch": "../../etc")"), R"(entries[0].images[0].arch: expected an SM arch such as "sm_90" or an AMD target ID such as "gfx90a:xnack-", got the string "../../etc")"},
      {index_with(R"(, "side": "host")", R"(, "kind": "obj", "arch": "x86/64")"), R"(entries[0].images[0].arch: expected a CPU arch such as "x86_64")"},
      {index_with("", R"(, "sha256": "B")"), R"(entries[0].images[0].sha256: expected 64 lower-case hex digits, got the string "B")"},
      {index_with("", R"(, "kernels": "k")"), R"(entries[0].images[0].kernels: expected an array)"},
      {index_with("", R"(, "file": 7)"), "entries[0].images[0].file: expected a non-empty string, got the number 7"},
      {index_with("", R"(, "file": "../secret")"), "outside the bundle"},
      {index_with(R"(, "module": 1)", ""), "entries[0].module: expected a string, got the number 1"},
      {R"({"format": "kcache-bundle-1", "entries": [{"key": "../x", "images": []}]})",
       R"(bundle index entries[0].key: expected 64 lower-case hex digits, got the string "../x")"},
      {R"({"format": "kcache-bundle-1", "entries": [{"images": []}]})", "entries[0].key: missing (it is required)"},
      {R"({"format": "kcache-bundle-1", "entries": {}})", "bundle index entries: expected an array, got an object"},
      {R"({"format": "kcache-bundle-2", "entries": []})", R"(bundle index format: expected "kcache-bundle-1", got the string "kcache-bundle-2")"},
      {R"({"format": "kcache-bundle-1", "fingerprint": 3, "entries": []})", "bundle index fingerprint: expected 64 lower-case hex digits"},
      {R"({"entries": []})", "bundle index format: missing (it is required)"},
      {"[]", "bundle index the document: expected an object, got an array"},
      {"{", "bundle index is not valid JSON"},
  };
  for (const Case& c : cases) {
    auto index = parse_bundle_index(c.text);
    ASSERT_FALSE(index) << c.text;
    EXPECT_EQ(index.error().code, ErrorCode::k_invalid_argument);
    EXPECT_NE(index.error().message.find(c.message), std::string::npos) << c.text << "\n  got: " << index.error().message;
  }

  TempDir dir;
  std::filesystem::create_directories(dir.path() / "bundle");
  write_file(dir.path() / "bundle" / "index.json", index_with("", R"(, "size": "5")"));
  auto r = run_cli({"bundle-fetch", (dir.path() / "bundle").string(), key, "--arch", "sm_80"}, "");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find((dir.path() / "bundle" / "index.json").string() + ": bundle index entries[0].images[0].size: "),
            std::string::npos)
      << r.err;
  std::filesystem::create_directories(dir.path() / "folder" / "index.json");
  auto folder = run_cli({"bundle-fetch", (dir.path() / "folder").string(), key, "--arch", "sm_80"}, "");
  EXPECT_EQ(folder.exit_code, 3) << folder.err;
  EXPECT_NE(folder.err.find("it is a folder"), std::string::npos) << folder.err;
}

}  // namespace
}  // namespace kcache::test
