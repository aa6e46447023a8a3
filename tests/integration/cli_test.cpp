// The kcache command line: the contract scripts rely on (subcommands, --json fields, output
// files, exit codes, server resolution).
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include "file_names.hpp"
#include "wire/wire.hpp"

#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

using json = nlohmann::json;
using Cli = DaemonTest;

json parse_json(const CommandResult& r) {
  try {
    return json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not JSON: " << r.out << "\nstderr: " << r.err;
    return json::object();
  }
}

TEST_F(Cli, CompileWritesOneFilePerImageAndReportsMissThenHit) {
  std::filesystem::path src = m_dir.path() / "saxpy.ll", out = m_dir.path() / "out";
  write_file(src, own_module(read_test_data("kernels/saxpy.ll")));
  std::vector<std::string> args = {"--json", "compile", src.string(), "--arch", "sm_80,sm_90", "--out-dir", out.string()};
  auto first = run_cli(args, m_daemon->address());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  json j = parse_json(first);
  EXPECT_EQ(j["outcome"], "miss");
  EXPECT_EQ(j["key"].get<std::string>().size(), 64u);
  ASSERT_EQ(j["images"].size(), 2u);
  for (const json& image : j["images"]) {
    std::string path = image["path"];
    EXPECT_EQ(path, (out / (image["arch"].get<std::string>() + ".ptx")).string());
    std::string bytes = read_file(path);
    EXPECT_EQ(bytes.size(), image["size"].get<std::size_t>());
    EXPECT_EQ(sha256_hex(bytes), image["sha256"].get<std::string>());
    EXPECT_EQ(image["kind"], "ptx");
  }
  auto second = run_cli(args, m_daemon->address());
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(parse_json(second)["outcome"], "hit");
  EXPECT_EQ(parse_json(second)["key"], j["key"]);
}

// A hit whose output already holds the image's bytes keeps the file and gives it the time of now,
// as a rewrite would (make sees a fresh output); other bytes in it, of any size, are replaced.
TEST_F(Cli, AnOutputHoldingTheImageAlreadyIsKeptAndTouched) {
  std::filesystem::path src = m_dir.path() / "saxpy.ll", out = m_dir.path() / "k.ptx";
  write_file(src, read_test_data("kernels/saxpy.ll"));
  std::vector<std::string> args = {"compile", src.string(), "--arch", "sm_90", "-o", out.string()};
  ASSERT_EQ(run_cli(args, m_daemon->address()).exit_code, 0);
  const std::string image = read_file(out);
  ASSERT_FALSE(image.empty());
  auto inode = [&] {
    struct stat st {};
    EXPECT_EQ(::stat(out.c_str(), &st), 0);
    return st.st_ino;
  };
  const auto before = inode();
  const auto past = std::filesystem::last_write_time(out) - std::chrono::hours(1);
  std::filesystem::last_write_time(out, past);
  auto again = run_cli(args, m_daemon->address());
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(again.out.starts_with("hit ")) << again.out;
  EXPECT_EQ(read_file(out), image);
  EXPECT_EQ(inode(), before);
  EXPECT_GT(std::filesystem::last_write_time(out), past + std::chrono::minutes(30)) << "touched";

  std::string same_size(image.size(), 'x');
  write_file(out, same_size);
  ASSERT_EQ(run_cli(args, m_daemon->address()).exit_code, 0);
  EXPECT_EQ(read_file(out), image);
  write_file(out, image + "trailing");
  ASSERT_EQ(run_cli(args, m_daemon->address()).exit_code, 0);
  EXPECT_EQ(read_file(out), image);
}

TEST_F(Cli, KeyFetchLookupAndStatsAgree) {
  std::filesystem::path src = m_dir.path() / "saxpy.ll";
  write_file(src, read_test_data("kernels/saxpy.ll"));
  auto key = run_cli({"key", src.string(), "-O", "3"}, m_daemon->address());
  ASSERT_EQ(key.exit_code, 0) << key.err;
  std::string k = key.out.substr(0, 64);

  auto lookup_before = run_cli({"lookup", k}, m_daemon->address());
  EXPECT_EQ(lookup_before.exit_code, 4) << lookup_before.out;

  auto compile = run_cli({"--json", "compile", src.string(), "-O", "3", "--arch", "sm_80"}, m_daemon->address());
  ASSERT_EQ(compile.exit_code, 0) << compile.err;
  EXPECT_EQ(parse_json(compile)["key"], k);
  EXPECT_TRUE(parse_json(compile)["images"][0]["path"].is_null());  // nothing asked to be written

  std::filesystem::path file = m_dir.path() / "fetched.ptx";
  auto fetch = run_cli({"--json", "fetch", k, "--arch", "sm_89", "-o", file.string()}, m_daemon->address());
  ASSERT_EQ(fetch.exit_code, 0) << fetch.err;
  json f = parse_json(fetch);
  EXPECT_EQ(f["outcome"], "hit");
  EXPECT_EQ(f["images"][0]["arch"], "sm_80");
  EXPECT_EQ(f["images"][0]["needs_jit"], true);
  EXPECT_EQ(sha256_hex(read_file(file)), f["images"][0]["sha256"].get<std::string>());

  auto lookup = run_cli({"--json", "lookup", k}, m_daemon->address());
  EXPECT_EQ(lookup.exit_code, 0);
  EXPECT_EQ(parse_json(lookup)["results"][0]["found"], true);

  auto stats = run_cli({"--json", "stats"}, m_daemon->address());
  ASSERT_EQ(stats.exit_code, 0);
  json s = parse_json(stats);
  for (const char* field : {"hits", "misses", "compiles", "coalesced", "entries", "bytes"}) {
    EXPECT_TRUE(s.contains(field)) << field;
  }
  EXPECT_EQ(s["entries"], 1);
  EXPECT_EQ(s["misses"], 1);
  EXPECT_EQ(s["compiles"], 1);
}

TEST_F(Cli, ExitCodesDistinguishBadInputNotFoundUnavailableAndUsage) {
  std::filesystem::path bad = m_dir.path() / "bad.ll";
  write_file(bad, "this is not IR\n");
  auto bad_input = run_cli({"compile", bad.string(), "--arch", "sm_90"}, m_daemon->address());
  EXPECT_EQ(bad_input.exit_code, 3);
  EXPECT_NE(bad_input.err.find("INVALID_ARGUMENT"), std::string::npos) << bad_input.err;

  auto not_found = run_cli({"fetch", std::string(64, '0'), "--arch", "sm_90"}, m_daemon->address());
  EXPECT_EQ(not_found.exit_code, 4);
  EXPECT_NE(not_found.err.find("not stored"), std::string::npos) << not_found.err;

  auto unavailable = run_cli({"stats"}, "127.0.0.1:1");
  EXPECT_EQ(unavailable.exit_code, 5);
  EXPECT_NE(unavailable.err.find("cannot reach kcached at 127.0.0.1:1"), std::string::npos) << unavailable.err;

  auto usage = run_cli({"compile"}, m_daemon->address());
  EXPECT_EQ(usage.exit_code, 2);
  auto help = run_cli({"--help"}, "");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("Exit codes"), std::string::npos);
}

// What a new user gets wrong, each a usage error (exit 2) that says what to do: a misspelt
// command names the closest; an address without its port says so (for the client and for
// kcached, which spoke of TLS); a config file's unknown key, repeated key or [table] is named
// with its line. And --version on each program.
TEST_F(Cli, ANewUsersMistakesAreUsageErrorsThatSayWhatToDo) {
  auto misspelt = run_cli({"complie", "x.ll"}, m_daemon->address());
  EXPECT_EQ(misspelt.exit_code, 2);
  EXPECT_NE(misspelt.err.find("unknown command 'complie'; did you mean 'compile'?"), std::string::npos) << misspelt.err;
  auto nothing_near = run_cli({"frobnicate"}, m_daemon->address());
  EXPECT_EQ(nothing_near.exit_code, 2);
  EXPECT_NE(nothing_near.err.find("unknown command 'frobnicate' (kcache --help"), std::string::npos) << nothing_near.err;

  auto portless = run_cli({"stats"}, "build-host");
  EXPECT_EQ(portless.exit_code, 2) << "a usage error, not 'unavailable'";
  EXPECT_NE(portless.err.find("'build-host' names no port: give HOST:PORT"), std::string::npos) << portless.err;

  auto daemon = [&](std::vector<std::string> args) {
    args.insert(args.begin(), KCACHE_DAEMON_PATH);
    args.insert(args.end(), {"--db", (m_dir.path() / "unused-db").string()});
    return run_program(args);
  };
  auto listen = daemon({"--listen", "127.0.0.1"});
  EXPECT_EQ(listen.exit_code, 2);
  EXPECT_NE(listen.err.find("--listen '127.0.0.1' is not HOST:PORT"), std::string::npos) << listen.err;
  EXPECT_EQ(listen.err.find("TLS"), std::string::npos) << listen.err;

  auto with_config = [&](const std::string& text) {
    std::filesystem::path file = m_dir.path() / "kcached.toml";
    write_file(file, text);
    return daemon({"--config", file.string()});
  };
  auto unknown = with_config("listen = \"127.0.0.1:0\"\nmax_size = \"1G\"\nmax-sise = \"1G\"\n");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find("kcached.toml:3: unknown key 'max-sise'"), std::string::npos) << unknown.err;
  EXPECT_NE(unknown.err.find("max-size"), std::string::npos) << "the known keys are listed: " << unknown.err;
  auto twice = with_config("workers = 2\n# a comment\nworkers = 3\n");
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_NE(twice.err.find("kcached.toml:3: 'workers' is given a second time (first on line 1)"), std::string::npos)
      << twice.err;
  auto table = with_config("[daemon]\nworkers = 2\n");
  EXPECT_EQ(table.exit_code, 2);
  EXPECT_NE(table.err.find("kcached.toml:1: '[daemon]': kcached's configuration has no tables"), std::string::npos)
      << table.err;

  const std::string grpc_cli = (std::filesystem::path(KCACHE_CLI_PATH).parent_path() / "kcache-grpc").string();
  for (const auto& [program, argv] : {std::pair<std::string, std::vector<std::string>>{"kcached", {KCACHE_DAEMON_PATH, "--version"}},
                                      {"kcache", {KCACHE_CLI_PATH, "--version"}},
                                      {"kcache", {grpc_cli, "--version"}}}) {
    auto version = run_program(argv);
    EXPECT_EQ(version.exit_code, 0) << argv[0] << ": " << version.err;
    EXPECT_TRUE(version.out.starts_with(program + " 0.")) << version.out;
    EXPECT_NE(version.out.find("(commit "), std::string::npos) << version.out;
    EXPECT_NE(version.out.find("built with LLVM 22"), std::string::npos) << version.out;
    EXPECT_NE(version.out.find(" and CUDA "), std::string::npos) << version.out;
  }
}

// `kcache compile` of an ordinary .cu file that includes the standard library: NVRTC cannot see
// <cstdio>; the message points to `kcache nvcc`, and NVRTC's log is printed once.
TEST_F(Cli, AnOrdinaryCudaFileIsPointedToTheLauncher) {
  if (!std::filesystem::exists(std::filesystem::path(KCACHE_CUDA_ROOT) / "bin" / "nvcc")) {
    GTEST_SKIP() << "no CUDA toolkit at " << KCACHE_CUDA_ROOT << ": no NVRTC";
  }
  std::filesystem::path source = m_dir.path() / "ordinary.cu";
  write_file(source, "#include <cstdio>\n__global__ void k(int* x) { x[0] = 1; }\n");
  auto r = run_cli({"compile", source.string(), "--arch", "sm_80"}, m_daemon->address());
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_NE(r.err.find("kcache nvcc -c FILE"), std::string::npos) << r.err;
  const std::string log_line = "cannot open source file \"cstdio\"";
  auto first = r.err.find(log_line);
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(log_line, first + 1), std::string::npos) << "NVRTC's log printed twice: " << r.err;
}

TEST_F(Cli, OutputFileNeedsExactlyOneImage) {
  std::filesystem::path src = m_dir.path() / "saxpy.ll";
  write_file(src, read_test_data("kernels/saxpy.ll"));
  auto two = run_cli({"compile", src.string(), "--arch", "sm_80,sm_90", "-o", (m_dir.path() / "x").string()},
                     m_daemon->address());
  EXPECT_EQ(two.exit_code, 2);
  EXPECT_NE(two.err.find("--out-dir"), std::string::npos);
  auto one = run_cli({"compile", src.string(), "--arch", "sm_90", "-o", (m_dir.path() / "x.ptx").string()},
                     m_daemon->address());
  EXPECT_EQ(one.exit_code, 0) << one.err;
  EXPECT_NE(read_file(m_dir.path() / "x.ptx").find(".target sm_90"), std::string::npos);
}

TEST_F(Cli, ServerComesFromTheEnvironmentWhenNotGiven) {
  ASSERT_EQ(setenv("KCACHE_SERVER", m_daemon->address().c_str(), 1), 0);
  auto r = run_cli({"--json", "stats"}, "");
  unsetenv("KCACHE_SERVER");
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

// Global flags go before or after the subcommand (they once had to come first: exit 2).
TEST_F(Cli, GlobalFlagsWorkBeforeOrAfterTheSubcommand) {
  std::filesystem::path src = m_dir.path() / "saxpy.ll", token = m_dir.path() / "token";
  write_file(src, read_test_data("kernels/saxpy.ll"));
  write_file(token, "some-token\n");  // this daemon checks no token: any is accepted
  const std::string server = m_daemon->address();

  auto compile = run_cli({"compile", src.string(), "--arch", "sm_90", "--json", "--server", server, "--timeout", "60"}, "");
  ASSERT_EQ(compile.exit_code, 0) << compile.err;
  EXPECT_EQ(parse_json(compile)["outcome"], "miss");
  auto stats = run_cli({"stats", "--json", "--token-file", token.string(), "--server", server}, "");
  ASSERT_EQ(stats.exit_code, 0) << stats.err;
  EXPECT_EQ(parse_json(stats)["misses"], 1);
  // The cached compile (kcache's own HTTP path) takes them after the subcommand too.
  auto hit = run_cli({"compile", src.string(), "--server", server, "--arch", "sm_90", "--timeout", "60"}, "");
  ASSERT_EQ(hit.exit_code, 0) << hit.err;
  EXPECT_TRUE(hit.out.starts_with("hit  ")) << hit.out;
  auto mixed = run_cli({"--json", "lookup", parse_json(compile)["key"], "--server", server}, "");
  ASSERT_EQ(mixed.exit_code, 0) << mixed.err;
  EXPECT_EQ(parse_json(mixed)["results"][0]["found"], true);
  // A TLS flag after the subcommand is taken as one: TLS to a plaintext daemon cannot connect.
  auto tls = run_cli({"stats", "--tls", "--server", server, "--timeout", "5"}, "");
  EXPECT_EQ(tls.exit_code, 5) << tls.err;
}

// Every file-system failure names its path and ends in the exit code of docs/cli.md's table
// (1: a file that cannot be written; 2: an input that cannot be read), never in an abort.
TEST_F(Cli, FileSystemErrorsNameThePathAndNeverAbort) {
  std::filesystem::path src = m_dir.path() / "saxpy.ll", a_file = m_dir.path() / "a_file";
  write_file(src, own_module(read_test_data("kernels/saxpy.ll")));  // the first round is a miss
  write_file(a_file, "not a folder\n");
  const std::string server = m_daemon->address();
  auto expect_failure = [](const CommandResult& r, int code, const std::string& message) {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("terminate called"), std::string::npos) << r.err;
  };
  // Twice: through kcache-grpc (a miss), then through kcache's own HTTP path (a hit).
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round);
    expect_failure(run_cli({"compile", src.string(), "--arch", "sm_90", "--out-dir", a_file.string()}, server), 1,
                   "cannot create the folder " + a_file.string() + ": ");
    expect_failure(run_cli({"compile", src.string(), "--arch", "sm_90", "--out-dir", (a_file / "sub").string()}, server),
                   1, "cannot create the folder " + (a_file / "sub").string());
    expect_failure(run_cli({"compile", src.string(), "--arch", "sm_90", "-o", (m_dir.path() / "no" / "x.ptx").string()},
                           server),
                   1, "cannot write " + (m_dir.path() / "no" / "x.ptx").string() + ": No such file or directory");
    std::string long_name = (m_dir.path() / std::string(300, 'n')).string();
    expect_failure(run_cli({"compile", src.string(), "--arch", "sm_90", "-o", long_name}, server), 1,
                   "cannot write " + long_name + ": File name too long");
  }
  expect_failure(run_cli({"compile", m_dir.path().string(), "--arch", "sm_90"}, server), 2,
                 "cannot read " + m_dir.path().string() + ": it is a folder");
  expect_failure(run_cli({"precompile", m_dir.path().string(), "--out", (m_dir.path() / "b").string()}, server), 2,
                 "cannot read " + m_dir.path().string() + ": it is a folder");
  write_file(m_dir.path() / "m.json", R"({"archs": ["sm_90"], "modules": [{"path": "saxpy.ll"}]})");
  expect_failure(run_cli({"precompile", (m_dir.path() / "m.json").string(), "--out", a_file.string()}, server), 1,
                 "cannot create the folder " + (a_file / "images").string());
  auto as_json = run_cli({"--json", "compile", src.string(), "--arch", "sm_90", "--out-dir", a_file.string()}, server);
  EXPECT_EQ(as_json.exit_code, 1);
  EXPECT_EQ(parse_json(as_json)["exit_code"], 1) << as_json.out;
  EXPECT_EQ(read_file(a_file), "not a folder\n");
}

// A kcached that takes 64 KiB of modules a job, so that a module past its limit is a small sparse
// file.
class CliInputs : public DaemonTest {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--max-module-size", "64K"}; }
};

// Inputs are read as regular files and never past the daemon's --max-module-size, as its
// capabilities say: a FIFO, /dev/zero or a 256 MiB module is refused at once, naming what it is
// (`kcache compile /dev/zero` once took 4.2 GB in 5 s, and a FIFO hung it).
TEST_F(CliInputs, CompileRefusesFifosDevicesAndModulesPastTheDaemonsLimit) {
  std::filesystem::path fifo = m_dir.path() / "k.ll", big = m_dir.path() / "big.bc", src = m_dir.path() / "saxpy.ll";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  write_file(big, "");
  std::filesystem::resize_file(big, 256ULL << 20);
  write_file(src, read_test_data("kernels/saxpy.ll"));
  const std::string server = m_daemon->address();
  for (const char* command : {"compile", "key"}) {
    expect_quick_refusal({command, fifo.string(), "--arch", "sm_80"}, server, 2,
                         "cannot read " + fifo.string() + ": it is a FIFO, not a regular file");
    expect_quick_refusal({command, "/dev/zero", "--arch", "sm_80"}, server, 2,
                         "cannot read /dev/zero: it is a character device, not a regular file");
  }
  expect_quick_refusal({"compile", big.string(), "--arch", "sm_80"}, server, 3,
                       "cannot read " + big.string() +
                           ": it holds 268435456 bytes, more than the 65536 allowed by kcached's --max-module-size");
  // Linked modules share the limit: each is read within what the ones before it left.
  std::filesystem::resize_file(big, 64ULL << 10);
  expect_quick_refusal({"compile", src.string(), big.string(), "--arch", "sm_80"}, server, 3,
                       "cannot read " + big.string() + ": it holds 65536 bytes, more than the " +
                           std::to_string((64 << 10) - std::filesystem::file_size(src)) +
                           " allowed by kcached's --max-module-size (65536 bytes for all of a job's modules");
}

// A manifest and the modules it names are read the same way: a manifest that is a FIFO or a device
// is exit 2; a module that is one, or past the daemon's limit, fails the precompile (exit 3),
// named, with no bundle written.
TEST_F(CliInputs, PrecompileRefusesFifosDevicesAndModulesPastTheDaemonsLimit) {
  std::filesystem::path fifo = m_dir.path() / "k.ll", big = m_dir.path() / "big.bc", out = m_dir.path() / "bundle";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  write_file(big, "");
  std::filesystem::resize_file(big, 256ULL << 20);
  const std::string server = m_daemon->address(), manifest = (m_dir.path() / "m.json").string();
  const std::pair<std::string, std::string> modules[] = {
      {"k.ll", "k.ll: cannot read " + fifo.string() + ": it is a FIFO, not a regular file"},
      {"/dev/zero", "/dev/zero: cannot read /dev/zero: it is a character device, not a regular file"},
      {"big.bc", "big.bc: cannot read " + big.string() +
                     ": it holds 268435456 bytes, more than the 65536 allowed by kcached's --max-module-size"},
  };
  for (const auto& [module, message] : modules) {
    write_file(manifest, json{{"archs", {"sm_80"}}, {"modules", {{{"path", module}}}}}.dump());
    expect_quick_refusal({"precompile", manifest, "--out", out.string()}, server, 3, message);
    EXPECT_FALSE(std::filesystem::exists(out / "index.json"));
  }
  expect_quick_refusal({"precompile", fifo.string(), "--out", out.string()}, server, 2,
                       "cannot read " + fifo.string() + ": it is a FIFO, not a regular file");
  expect_quick_refusal({"precompile", "/dev/zero", "--out", out.string()}, server, 2,
                       "cannot read /dev/zero: it is a character device, not a regular file");
}

// A daemon whose replies name files badly: every name written into --out-dir or a bundle comes
// from its reply (the image's arch, the key), and each must be a plain file name.
class HostileKCache final : public v1::KCache::Service {
 public:
  std::string key = std::string(64, 'a');
  std::string arch = "sm_90";
  grpc::Status Compile(grpc::ServerContext*, const v1::CompileRequest*, v1::CompileResponse* response) override {
    response->set_key(key);
    response->set_outcome(v1::OUTCOME_HIT);
    v1::Image* image = response->add_images();
    image->set_kind(v1::KIND_PTX);
    image->set_arch(arch);
    image->set_data("// ptx\n");
    image->set_size(image->data().size());
    image->set_sha256(sha256_hex(image->data()));
    return grpc::Status::OK;
  }
  grpc::Status GetCapabilities(grpc::ServerContext*, const v1::GetCapabilitiesRequest*, v1::Capabilities* caps) override {
    caps->set_fingerprint(std::string(64, '0'));
    return grpc::Status::OK;
  }
};

TEST(FileNames, OnlyPlainNamesAreSafe) {
  using namespace std::string_view_literals;
  for (std::string_view good : {"sm_90"sv, "sm_90a"sv, "x86_64"sv, "aarch64"sv, "0123456789abcdef"sv, "a.b-c+d"sv,
                              "gfx942:sramecc+:xnack-"sv}) {
    EXPECT_TRUE(is_safe_file_name_part(good)) << good;
  }
  for (std::string_view bad : {""sv, "."sv, ".."sv, "../x"sv, "a/b"sv, "/etc"sv, "a..b"sv, ".hidden"sv, "-rf"sv, "a b"sv,
                               "a\\b"sv, "sm_90\n"sv, "a\0b"sv, "\xc3\xa9t\xc3\xa9"sv}) {
    EXPECT_FALSE(is_safe_file_name_part(bad)) << quote_for_message(bad);
  }
  EXPECT_TRUE(is_safe_file_name_part(std::string(k_max_file_name_part, 'a')));
  EXPECT_FALSE(is_safe_file_name_part(std::string(k_max_file_name_part + 1, 'a')));
  auto refused = check_file_name_part("the daemon's image arch", std::string("../\0x", 5));
  ASSERT_FALSE(refused);
  EXPECT_TRUE(refused.error().message.starts_with(R"(the daemon's image arch "../\x00x" is not a safe file name)"))
      << refused.error().message;
}

TEST(HostileDaemon, FileNamesFromItsRepliesAreRefused) {
  HostileKCache service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  TempDir dir;
  std::filesystem::path src = dir.path() / "saxpy.ll", out = dir.path() / "deep" / "out";
  write_file(src, read_test_data("kernels/saxpy.ll"));

  for (std::string arch : {std::string("../../escaped"), std::string(), std::string(".hidden"), std::string("a/b"),
                           std::string("sm_90\0x", 7)}) {
    service.arch = arch;
    auto r = run_cli({"compile", src.string(), "--arch", "sm_90", "--out-dir", out.string()}, address);
    EXPECT_EQ(r.exit_code, 1) << quote_for_message(arch) << ": " << r.err;
    EXPECT_NE(r.err.find("the daemon's image arch " + quote_for_message(arch) + " is not a safe file name"),
              std::string::npos)
        << r.err;
    EXPECT_FALSE(std::filesystem::exists(out)) << "nothing written for " << quote_for_message(arch);
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "escaped.ptx"));

  service.arch = "sm_90";
  write_file(dir.path() / "m.json", R"({"archs": ["sm_90"], "modules": [{"path": "saxpy.ll"}]})");
  for (std::string key : {"../../k", "", "a/b"}) {
    service.key = key;
    auto r = run_cli({"precompile", (dir.path() / "m.json").string(), "--out", (dir.path() / "bundle").string()}, address);
    EXPECT_EQ(r.exit_code, 3) << r.err;
    EXPECT_NE(r.err.find("the daemon's key " + quote_for_message(key) + " is not a safe file name"), std::string::npos)
        << r.err;
    EXPECT_FALSE(std::filesystem::exists(dir.path() / "bundle" / "index.json"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "k.sm_90.ptx"));
  server->Shutdown();
}

}  // namespace
}  // namespace kcache::test

namespace kcache::test {
namespace {

TEST_F(Cli, HostCompileWithStubsWritesTheObjectAndListsWhatWasStubbed) {
  std::filesystem::path src = m_dir.path() / "host.ll", obj = m_dir.path() / "host.o";
  write_file(src, read_test_data("package/host.ll"));
  auto rejected = run_cli({"compile", src.string(), "--side", "host", "-o", obj.string()}, m_daemon->address());
  EXPECT_EQ(rejected.exit_code, 3);
  EXPECT_NE(rejected.err.find("gpu_malloc (rtlib function), used by global 'allocators'"), std::string::npos)
      << rejected.err;
  EXPECT_FALSE(std::filesystem::exists(obj));

  auto human = run_cli({"compile", src.string(), "--side", "host", "--host-runtime", "stub", "-o", obj.string()},
                       m_daemon->address());
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("stubbed for the host: gpu_report_exception"), std::string::npos) << human.out;
  EXPECT_EQ(read_file(obj).substr(0, 4), "\x7f" "ELF");

  auto json_run = run_cli({"--json", "compile", src.string(), "--side", "host", "--host-runtime", "stub"},
                          m_daemon->address());
  ASSERT_EQ(json_run.exit_code, 0) << json_run.err;
  json j = parse_json(json_run);
  EXPECT_EQ(j["outcome"], "hit");
  EXPECT_EQ(j["images"][0]["kind"], "obj");
  EXPECT_EQ(j["images"][0]["arch"], "x86_64");
  std::vector<std::string> stubbed = j["images"][0]["stubbed"];
  EXPECT_EQ(stubbed, (std::vector<std::string>{"gpu_malloc", "gpu_report_exception",
                                               "thread_index (uses llvm.nvvm.read.ptx.sreg.tid.x)"}));
}

// Relocatable device code from the command line: several files, one image per arch.
TEST_F(Cli, CompileLinksSeveralModulesAndTheKeyCoversEachInOrder) {
  const std::string header = "target triple = \"nvptx64-nvidia-cuda\"\n";
  std::filesystem::path kernel = m_dir.path() / "kernel.ll", scale = m_dir.path() / "scale.bc",
                        bias = m_dir.path() / "bias.ll", out = m_dir.path() / "out";
  write_file(kernel, header + R"(declare float @scale(float)
@bias = external addrspace(1) global float
define ptx_kernel void @apply(ptr %data) {
  %x = load float, ptr %data
  %y = call float @scale(float %x)
  %b = load float, ptr addrspace(1) @bias
  %z = fadd float %y, %b
  store float %z, ptr %data
  ret void
})");
  write_file(scale, to_bitcode(header + "define float @scale(float %x) {\n  %y = fmul float %x, 2.0\n  ret float %y\n}\n"));
  write_file(bias, header + "@bias = addrspace(1) global float 1.0\n");

  auto linked = run_cli({"--json", "compile", kernel.string(), scale.string(), bias.string(), "--arch", "sm_80,sm_90",
                         "--emit", "ptx", "--out-dir", out.string()},
                        m_daemon->address());
  ASSERT_EQ(linked.exit_code, 0) << linked.err;
  json j = parse_json(linked);
  ASSERT_EQ(j["images"].size(), 2u);
  std::string ptx = read_file(out / "sm_90.ptx");
  EXPECT_NE(ptx.find(".visible .entry apply("), std::string::npos) << ptx;
  EXPECT_EQ(ptx.find(".extern"), std::string::npos) << "scale and bias resolved:\n" << ptx;

  auto key = run_cli({"key", kernel.string(), scale.string(), bias.string()}, m_daemon->address());
  ASSERT_EQ(key.exit_code, 0) << key.err;
  EXPECT_EQ(key.out.substr(0, 64), j["key"].get<std::string>()) << "the local key agrees with the daemon's";
  auto reordered = run_cli({"key", kernel.string(), bias.string(), scale.string()}, m_daemon->address());
  auto alone = run_cli({"key", kernel.string()}, m_daemon->address());
  EXPECT_NE(reordered.out.substr(0, 64), j["key"].get<std::string>()) << "the order is part of the key";
  EXPECT_NE(alone.out.substr(0, 64), j["key"].get<std::string>());

  auto again = run_cli({"compile", kernel.string(), scale.string(), bias.string(), "--arch", "sm_80,sm_90"},
                       m_daemon->address());
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out.substr(0, 3), "hit") << again.out;

  auto unlinked = run_cli({"compile", kernel.string(), bias.string(), "--arch", "sm_80"}, m_daemon->address());
  EXPECT_EQ(unlinked.exit_code, 3);
  EXPECT_NE(unlinked.err.find("scale: used by function 'apply'"), std::string::npos) << unlinked.err;

  std::filesystem::path host = m_dir.path() / "host.ll";
  write_file(host, read_test_data("package/host.ll"));
  auto host_linked = run_cli({"compile", host.string(), host.string(), "--side", "host"}, m_daemon->address());
  EXPECT_EQ(host_linked.exit_code, 3);
  EXPECT_NE(host_linked.err.find("a host job compiles one module"), std::string::npos) << host_linked.err;
}

// An error naming a thousand symbols, each with many users: the status stays short, the whole
// report reaches the person (and --json), and a plain gRPC client with default limits still
// gets the status (the report was once sent as one >8 KiB message and lost).
TEST_F(Cli, AThousandUndefinedSymbolsReachThePersonWhole) {
  std::string ir = "target triple = \"nvptx64-nvidia-cuda\"\n";
  for (int s = 0; s < 1000; ++s) ir += "declare void @undefined_function_number_" + std::to_string(s) + "()\n";
  for (int k = 0; k < 6; ++k) {
    ir += "define ptx_kernel void @kernel_" + std::to_string(k) + "() {\n";
    for (int s = 0; s < 1000; ++s) ir += "  call void @undefined_function_number_" + std::to_string(s) + "()\n";
    ir += "  ret void\n}\n";
  }
  std::filesystem::path src = m_dir.path() / "big.ll";
  write_file(src, ir);

  auto human = run_cli({"compile", src.string(), "--arch", "sm_80"}, m_daemon->address());
  EXPECT_EQ(human.exit_code, 3) << human.err;
  std::string first_line = human.err.substr(0, human.err.find('\n'));
  EXPECT_LT(first_line.size(), 1200u) << first_line;
  EXPECT_NE(first_line.find("1000 undefined symbols remain"), std::string::npos) << first_line;
  EXPECT_NE(first_line.find("more"), std::string::npos) << first_line;
  for (int s : {0, 500, 999}) {
    std::string line = "undefined_function_number_" + std::to_string(s) +
                       ": used by function 'kernel_0', function 'kernel_1', function 'kernel_2', function 'kernel_3', "
                       "function 'kernel_4', function 'kernel_5'";
    EXPECT_NE(human.err.find(line), std::string::npos) << "the report names every symbol with all its users: " << s;
  }

  auto as_json = run_cli({"--json", "compile", src.string(), "--arch", "sm_80"}, m_daemon->address());
  EXPECT_EQ(as_json.exit_code, 3);
  json j = parse_json(as_json);
  ASSERT_TRUE(j.contains("report")) << as_json.out;
  EXPECT_EQ(j["report"].size(), 1000u);
  EXPECT_EQ(j["exit_code"], 3);

  // A client that did not ask for the whole report, with gRPC's default limits.
  auto channel = grpc::CreateChannel(m_daemon->address(), grpc::InsecureChannelCredentials());
  v1::CompileResponse response;
  grpc::ClientContext ctx;
  grpc::Status status = v1::KCache::NewStub(channel)->Compile(&ctx, device_request(ir, {"sm_80"}), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_LE(status.error_message().size(), 1024u);
  EXPECT_NE(status.error_message().find("1000 undefined symbols remain"), std::string::npos);
  EXPECT_LE(status.error_details().size(), 4096u);
  Error e = wire::from_status(status);
  EXPECT_GT(e.details.size(), 3u);
  EXPECT_NE(e.details.back().find("more not sent"), std::string::npos) << e.details.back();
}

}  // namespace
}  // namespace kcache::test
