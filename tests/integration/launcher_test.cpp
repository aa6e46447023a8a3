// kcache as the CUDA compiler launcher (client/cli/launcher/), on the CMake project of
// tests/data/launcher (7 CUDA files: templates, a shared header, host-only code under
// #ifndef __CUDA_ARCH__, relocatable device code, two archs), built with nvcc through
// CMAKE_CUDA_COMPILER_LAUNCHER against real kcached processes (two of them on one Redis for the
// fleet), with clang++-22 as the CUDA compiler from a Ninja file of its own, and on single nvcc
// commands of odd shapes. The launcher's own counters
// (KCACHE_STATE_DIR/launcher-stats) say which steps hit, missed or ran here.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "kcache/client.hpp"
#include "kcache/process.hpp"
#include "launcher_machine.hpp"
#include "redis_process.hpp"
#include "test_paths.hpp"
#include "test_support.hpp"


namespace kcache::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

bool poll_until(const std::function<bool()>& condition, std::chrono::seconds timeout = 60s) {
  auto until = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

class Launcher : public ::testing::Test {
 protected:
  static constexpr long k_files = 7;  // the CUDA files of tests/data/launcher's program

  void SetUp() override {
    nvcc_ = fs::path(KCACHE_CUDA_ROOT) / "bin" / "nvcc";
    if (!fs::exists(nvcc_)) GTEST_SKIP() << "no CUDA toolkit at " << KCACHE_CUDA_ROOT << " (nvcc): nothing to launch";
    for (const char* tool : {"/usr/bin/cmake", "/usr/bin/ninja"}) {
      if (!fs::exists(tool)) GTEST_SKIP() << tool << " is absent";
    }
    src_ = m_dir.path() / "src";
    fs::copy(fs::path(KCACHE_TEST_DATA_DIR) / "launcher", src_, fs::copy_options::recursive);
  }
  void TearDown() override {
    if (!HasFailure()) return;
    m_dir.keep();
    std::fprintf(stderr, "kept %s (daemon logs, builds)\n", m_dir.path().c_str());
  }

  std::unique_ptr<DaemonProcess> start_daemon(const std::string& name, std::vector<std::string> args = {}) {
    return DaemonProcess::start(m_dir.path() / name / "db", m_dir.path() / (name + ".log"), args);
  }

  // Runs a command with the launcher's environment (server_, one state folder for the machine).
  ProcessResult run(const std::vector<std::string>& argv, const fs::path& cwd = {}) {
    return run_on_machine(argv, cwd, server_, m_dir.path() / "state");
  }
  int run_ok(const std::vector<std::string>& argv, const fs::path& cwd = {}) {
    auto ran = run(argv, cwd);
    if (ran.exit_code != 0) std::cerr << ran.output << ran.error_output;
    return ran.exit_code;
  }

  // The launcher's counters since the last call.
  std::map<std::string, long> counts() { return counts_.delta(); }

  int configure(const std::string& build, const std::string& archs = "80;90") {
    return run_ok({"/usr/bin/cmake", "-S", src_.string(), "-B", (m_dir.path() / build).string(), "-G", "Ninja",
                   "-DCMAKE_CUDA_COMPILER=" + nvcc_.string(), std::string("-DCMAKE_CUDA_COMPILER_LAUNCHER=") + KCACHE_CLI_PATH,
                   "-DFIXTURE_ARCHS=" + archs});
  }
  int build(const std::string& build) { return run_ok({"/usr/bin/ninja", "-C", (m_dir.path() / build).string()}); }

  std::string program_output(const std::string& build) { return run({(m_dir.path() / build / "fixture").string()}).output; }

  void edit(const std::string& file, const std::string& from, const std::string& to) {
    fs::path path = src_ / file;
    std::string s = read_all(path);
    auto at = s.find(from);
    ASSERT_NE(at, std::string::npos) << file << " lacks " << from;
    s.replace(at, from.size(), to);
    std::ofstream(path) << s;
  }

  // Every compile of an nvcc build was a hit of its whole compile (StepTool::nvcc): no step past
  // the preprocessors ran, here or on the daemon (cudafe++, cicc, ptxas, fatbinary, host compile).
  static void expect_every_whole_compile_hit(std::map<std::string, long> c, long files) {
    EXPECT_EQ(c["nvcc.hit"] + c["nvcc.local_hit"], files) << "from the daemon, or this machine's copy";
    EXPECT_EQ(c["nvcc.miss"], 0);
    for (const char* step : {"cicc", "ptxas", "host"}) {
      EXPECT_EQ(c[std::string(step) + ".hit"] + c[std::string(step) + ".miss"] + c[std::string(step) + ".local"], 0)
          << step << " ran although the whole compile hit";
    }
  }

  // Every compile of a clang build was a direct hit: its host object from its manifest, and no
  // preprocessor or step ran (clang's device compiles, ptxas, the host compile).
  static void expect_every_direct_hit(std::map<std::string, long> c, long files) {
    EXPECT_EQ(c["direct.hit"], files);
    EXPECT_EQ(c["host.hit"] + c["host.local_hit"], files) << "each file's object, from the daemon or this machine";
    EXPECT_EQ(c["clang.hit"] + c["clang.miss"] + c["ptxas.hit"] + c["ptxas.miss"] + c["host.miss"], 0);
  }

  // The edits every launcher build must take without serving a stale object, on `build_dir`
  // (two archs, `device` being cicc or clang): host-only code under #ifndef __CUDA_ARCH__ (the
  // device text is the same, so its steps hit; the host object misses; the program prints the new
  // string), then a header's code (its 4 dependents, and only they, compile again and miss).
  void edit_host_code_then_a_header(const std::string& build_dir, const std::string& device) {
    edit("src/banner.cu", "fixture banner v1", "fixture banner v2");
    ASSERT_EQ(build(build_dir), 0);
    auto host_change = counts();
    EXPECT_EQ(host_change["launcher.compiles"], 1);
    if (device == "cicc") {
      EXPECT_EQ(host_change["nvcc.miss"], 1) << "the host text changed: the whole compile misses";
    }
    EXPECT_EQ(host_change["host.miss"], 1);
    EXPECT_EQ(host_change[device + ".hit"], 2);
    EXPECT_EQ(host_change[device + ".miss"], 0);
    EXPECT_EQ(program_output(build_dir), "fixture banner v2\nnote 0\n");

    edit("include/launcher/common.cuh", "constexpr int k_block = 256;", "constexpr int k_block = 128;");
    ASSERT_EQ(build(build_dir), 0);
    auto header_change = counts();
    EXPECT_EQ(header_change["launcher.compiles"], 4) << "linear, reduce, softmax and rdc_user include it";
    if (device == "cicc") {
      EXPECT_EQ(header_change["nvcc.miss"], 4);
    }
    EXPECT_EQ(header_change[device + ".miss"], 8);
    EXPECT_EQ(header_change[device + ".hit"], 0);
  }

  // After a -D on main.cu's flags alone: main.cu alone compiles again, its host object is new, its
  // device text differs (the note's host code is in it) but compiles to the same PTX, whose
  // assembly hits; the program prints the note.
  void expect_the_note_reached_main_alone(const std::string& build_dir) {
    auto c = counts();
    EXPECT_EQ(c["launcher.compiles"], 1);
    EXPECT_EQ(c["host.miss"], 1);
    EXPECT_EQ(c["ptxas.hit"], 2);
    EXPECT_EQ(program_output(build_dir), "fixture banner v2\nnote 7\n");
  }

  // With the daemon stopped after the -D edit: the build still succeeds, each step runs here
  // (`device` being cicc or clang), and the program prints the new string.
  void build_with_the_daemon_down(const std::string& build_dir, const std::string& device) {
    edit("src/banner.cu", "fixture banner v2", "fixture banner v3");
    ASSERT_EQ(build(build_dir), 0);
    auto down = counts();
    EXPECT_EQ(down["launcher.daemon_unreachable"], 1);
    EXPECT_EQ(down[device + ".local"], 2);
    EXPECT_EQ(program_output(build_dir), "fixture banner v3\nnote 7\n");
  }

  // A redis-server for the test's fleet; the daemon flags that join it (with a shared secret).
  std::vector<std::string> start_redis_for_a_fleet() {
    redis_ = RedisServer::start(m_dir.path() / "redis");
    std::string secret = (m_dir.path() / "fleet.secret").string();
    std::ofstream(secret) << std::string(64, 'k');
    return {"--remote", "redis://127.0.0.1:" + std::to_string(redis_->port()), "--remote-secret-file", secret};
  }

  TempDir m_dir;
  fs::path nvcc_, src_;
  std::string server_;
  LauncherCounts counts_{m_dir.path() / "state"};
  std::unique_ptr<RedisServer> redis_;
};

// The project built by CMake and Ninja with nvcc, the launcher in front, on two machines of a fleet
// (two daemons on one Redis, two build folders): cold, then warm after ninja clean (no compiler
// step runs); the other machine gets every step from Redis (the same object bytes in both
// folders); an arch dropped keeps the other arch's entries; edits to host code, a header and a
// -D never serve a stale object; with the daemon down the build still succeeds.
TEST_F(Launcher, ACmakeBuildSharesEveryStepAcrossTheFleetAndNeverServesAStaleObject) {
  if (auto why = RedisServer::unavailable()) GTEST_SKIP() << *why;
  std::vector<std::string> fleet = start_redis_for_a_fleet();
  auto a = start_daemon("a", fleet);
  auto b = start_daemon("b", fleet);
  server_ = a->address();
  ASSERT_EQ(configure("build"), 0);
  counts();

  // Cold: every arch's cicc and ptxas runs on the daemon, and every host compile too (from the
  // GCC's -fdirectives-only text); each whole compile misses, and its object is offered after.
  ASSERT_EQ(build("build"), 0);
  auto cold = counts();
  EXPECT_EQ(cold["launcher.compiles"], k_files);
  EXPECT_EQ(cold["nvcc.miss"], k_files);
  EXPECT_EQ(cold["cicc.miss"], k_files * 2) << "each file x 2 archs";
  EXPECT_EQ(cold["ptxas.miss"], k_files * 2);
  EXPECT_EQ(cold["host.miss"], k_files);
  EXPECT_EQ(cold["host.compiled_by_daemon"], k_files);
  EXPECT_EQ(cold["cicc.local"] + cold["ptxas.local"] + cold["host.local"], 0);
  EXPECT_EQ(program_output("build"), "fixture banner v1\nnote 0\n");
  std::string cold_program = read_all(m_dir.path() / "build" / "fixture");

  // Warm, after ninja clean: only the preprocessors run (no cudafe++, cicc, ptxas, fatbinary or
  // host compile); the same program, byte for byte.
  ASSERT_EQ(run_ok({"/usr/bin/ninja", "-C", (m_dir.path() / "build").string(), "clean"}), 0);
  ASSERT_EQ(build("build"), 0);
  expect_every_whole_compile_hit(counts(), k_files);
  EXPECT_TRUE(read_all(m_dir.path() / "build" / "fixture") == cold_program) << "the rebuilt program differs";

  // A second machine: another build folder on the other daemon, which gets every step from Redis.
  Client a_client(ClientOptions{a->address(), std::chrono::seconds(30)});
  ASSERT_TRUE(poll_until([&] {
    auto s = a_client.stats();
    return s && s->remote_writes() >= static_cast<std::uint64_t>(k_files * 7);
  })) << "A's entries (cicc and ptxas per arch, the host object, the whole compile, its manifest) reach Redis";
  // It has none of A's machine's own objects and manifests: each compile finds the manifest
  // A's build published (no tokens: every client may publish) and the object, through Redis.
  server_ = b->address();
  fs::remove_all(m_dir.path() / "state" / "objects");
  fs::remove_all(m_dir.path() / "state" / "manifests");
  ASSERT_EQ(configure("build-b"), 0);
  ASSERT_EQ(build("build-b"), 0);
  auto second = counts();
  expect_every_whole_compile_hit(second, k_files);
  EXPECT_EQ(second["nvcc.hit"], k_files) << "each from the daemon";
  EXPECT_EQ(second["direct.shared_manifest"], k_files) << "no preprocessor ran: the manifests came through the fleet";
  Client b_client(ClientOptions{b->address(), std::chrono::seconds(30)});
  auto b_stats = b_client.stats();
  ASSERT_TRUE(b_stats);
  EXPECT_EQ(b_stats->compiles(), 0u) << "B ran no step";
  for (const char* object : {"CMakeFiles/kernels.dir/src/linear.cu.o", "CMakeFiles/rdc.dir/src/rdc_user.cu.o",
                             "CMakeFiles/fixture.dir/src/banner.cu.o"}) {
    EXPECT_TRUE(read_all(m_dir.path() / "build" / object) == read_all(m_dir.path() / "build-b" / object))
        << object << " differs between the build folders";
  }
  EXPECT_EQ(program_output("build-b"), "fixture banner v1\nnote 0\n");

  // sm_90 dropped: every file compiles again (its flags changed, so its whole compile misses);
  // sm_80's steps all hit.
  ASSERT_EQ(configure("build-b", "80"), 0);
  ASSERT_EQ(build("build-b"), 0);
  auto dropped = counts();
  EXPECT_EQ(dropped["launcher.compiles"], k_files);
  EXPECT_EQ(dropped["nvcc.miss"], k_files);
  EXPECT_EQ(dropped["cicc.hit"], k_files);
  EXPECT_EQ(dropped["ptxas.hit"], k_files);
  EXPECT_EQ(dropped["cicc.miss"] + dropped["ptxas.miss"], 0);

  server_ = a->address();
  edit_host_code_then_a_header("build", "cicc");

  // A -D on main.cu's command line reaches the host side.
  ASSERT_EQ(run_ok({"/usr/bin/cmake", "-S", src_.string(), "-B", (m_dir.path() / "build").string(),
                    "-DFIXTURE_MAIN_FLAGS=-DFIXTURE_NOTE=7"}),
            0);
  ASSERT_EQ(build("build"), 0);
  expect_the_note_reached_main_alone("build");

  a->stop();
  build_with_the_daemon_down("build", "cicc");
}

// The same project built with clang++-22 as the CUDA compiler, from a Ninja file of its own
// (tests/data/launcher/clang.ninja): each arch's device compile and ptxas run on the daemon, the
// host side's object is a host entry. Two build folders on two daemons sharing Redis stand for
// two machines of a fleet.
TEST_F(Launcher, AClangBuildSharesEachArchsDeviceCompileAcrossTheFleet) {
  for (const char* tool : {"/usr/bin/clang++-22", "/usr/lib/llvm-22/bin/clang-linker-wrapper"}) {
    if (!fs::exists(tool)) GTEST_SKIP() << tool << " is absent (clang-22, clang-tools-22)";
  }
  if (auto why = RedisServer::unavailable()) GTEST_SKIP() << *why;
  std::vector<std::string> fleet = start_redis_for_a_fleet();
  auto a = start_daemon("a", fleet);
  auto b = start_daemon("b", fleet);
  auto write_build = [&](const std::string& build, const std::string& archs, const std::string& main_flags = {}) {
    fs::create_directories(m_dir.path() / build);
    std::ofstream(m_dir.path() / build / "build.ninja")
        << "src = " << src_.string() << "\nlauncher = " << KCACHE_CLI_PATH << "\nclangxx = clang++-22\ncuda = "
        << KCACHE_CUDA_ROOT << "\narchs = " << archs << "\nmain_flags = " << main_flags << "\ninclude $src/clang.ninja\n";
  };
  const std::string both = "--cuda-gpu-arch=sm_80 --cuda-gpu-arch=sm_90";

  // Cold: every arch's device compile and ptxas on the daemon, and every host side's object too
  // (clang -cc1 of the launcher's clang, from its text and the device image it embeds).
  server_ = a->address();
  write_build("clang-a", both);
  counts();
  ASSERT_EQ(build("clang-a"), 0);
  auto cold = counts();
  EXPECT_EQ(cold["launcher.compiles"], k_files);
  EXPECT_EQ(cold["clang.miss"], k_files * 2) << "each file x 2 archs";
  EXPECT_EQ(cold["ptxas.miss"] + cold["ptxas.hit"], k_files * 2);
  EXPECT_EQ(cold["host.miss"], k_files);
  EXPECT_EQ(cold["host.compiled_by_daemon"], k_files) << "the daemon compiles clang's host side";
  EXPECT_EQ(cold["clang.local"] + cold["ptxas.local"] + cold["host.local"], 0);
  EXPECT_EQ(program_output("clang-a"), "fixture banner v1\nnote 0\n");
  std::string cold_program = read_all(m_dir.path() / "clang-a" / "fixture");

  // Warm, after ninja -t clean: each compile a direct hit, no preprocessor or step runs; the same
  // program, byte for byte.
  ASSERT_EQ(run_ok({"/usr/bin/ninja", "-C", (m_dir.path() / "clang-a").string(), "-t", "clean"}), 0);
  ASSERT_EQ(build("clang-a"), 0);
  expect_every_direct_hit(counts(), k_files);
  EXPECT_TRUE(read_all(m_dir.path() / "clang-a" / "fixture") == cold_program) << "the rebuilt program differs";

  // A second machine: another build folder on the other daemon, which gets every step from Redis.
  Client a_client(ClientOptions{a->address(), std::chrono::seconds(30)});
  ASSERT_TRUE(poll_until([&] {
    auto s = a_client.stats();
    return s && s->remote_writes() >= static_cast<std::uint64_t>(k_files * 5);
  })) << "A's entries reach Redis";
  server_ = b->address();
  write_build("clang-b", both);
  ASSERT_EQ(build("clang-b"), 0);
  expect_every_direct_hit(counts(), k_files);
  Client b_client(ClientOptions{b->address(), std::chrono::seconds(30)});
  auto b_stats = b_client.stats();
  ASSERT_TRUE(b_stats);
  EXPECT_EQ(b_stats->compiles(), 0u) << "B ran no step";
  for (const char* object : {"linear.o", "rdc_user.o", "banner.o", "fixture"}) {
    EXPECT_TRUE(read_all(m_dir.path() / "clang-a" / object) == read_all(m_dir.path() / "clang-b" / object))
        << object << " differs between the build folders";
  }

  // sm_90 dropped: every file compiles again; sm_80's device steps all hit.
  write_build("clang-b", "--cuda-gpu-arch=sm_80");
  ASSERT_EQ(build("clang-b"), 0);
  auto dropped = counts();
  EXPECT_EQ(dropped["launcher.compiles"], k_files);
  EXPECT_EQ(dropped["clang.hit"], k_files);
  EXPECT_EQ(dropped["ptxas.hit"], k_files);
  EXPECT_EQ(dropped["clang.miss"] + dropped["ptxas.miss"], 0);

  server_ = a->address();
  edit_host_code_then_a_header("clang-a", "clang");

  // A -D on main.cu's command line reaches the host side.
  write_build("clang-a", both, "-DFIXTURE_NOTE=7");
  ASSERT_EQ(build("clang-a"), 0);
  expect_the_note_reached_main_alone("clang-a");

  a->stop();
  build_with_the_daemon_down("clang-a", "clang");
}

// Direct mode (launcher/direct.hpp): a compile seen before is answered from its manifest, running
// no preprocessor and no step, and never with a stale object. Each program is linked by plain nvcc
// and run (its kernel is never launched: no GPU needed) to print what its object holds.
TEST_F(Launcher, ADirectHitRunsNoPreprocessorAndIsNeverStale) {
  auto daemon = start_daemon("a");
  server_ = daemon->address();
  const fs::path work = m_dir.path() / "direct";
  fs::create_directories(work / "inc");
  fs::create_directories(work / "bin");
  std::ofstream(work / "inc" / "scale.h") << "#define SCALE 2\n";
  std::ofstream(work / "inc" / "host_only.h") << "inline int host_value() { return 7; }\n";
  std::ofstream(work / "main.cu") << "#include <cstdio>\n#include \"scale.h\"\n"
                                     "__global__ void k(int* x) { x[0] = SCALE; }\n#ifndef __CUDA_ARCH__\n"
                                     "#include \"host_only.h\"\n"
                                     "int main() { std::printf(\"%d %d\\n\", SCALE, host_value()); return 0; }\n#endif\n";
  fs::create_symlink("/usr/bin/gcc", work / "bin" / "gcc");
  auto compile = [&](std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {KCACHE_CLI_PATH, nvcc_.string(), "-arch=sm_80", "-ccbin", (work / "bin").string(),
                                     "-I" + (work / "inc").string(), "-MD", "-MF", "main.d", "-c",
                                     (work / "main.cu").string(), "-o", "main.o"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    fs::remove(work / "main.o");
    EXPECT_EQ(run_ok(argv, work), 0);
    auto c = counts();
    if (run_ok({nvcc_.string(), "-arch=sm_80", "main.o", "-o", "prog"}, work) != 0) return std::make_pair(c, std::string());
    return std::make_pair(c, run({(work / "prog").string()}).output);
  };
  counts();
  auto [cold, cold_says] = compile();
  EXPECT_EQ(cold_says, "2 7\n");
  EXPECT_EQ(cold["direct.recorded"], 1);
  EXPECT_EQ(cold["direct.hit"], 0);
  const std::string dependencies = read_all(work / "main.d");
  EXPECT_NE(dependencies.find("host_only.h"), std::string::npos) << "the host side's headers are listed";

  auto [warm, warm_says] = compile();
  EXPECT_EQ(warm_says, "2 7\n");
  EXPECT_EQ(warm["direct.hit"], 1);
  EXPECT_EQ(warm["nvcc.local_hit"], 1) << "the whole compile's object, this machine's copy of what it offered";
  EXPECT_EQ(warm["direct.without_grpc"], 1) << "answered by kcache itself, before the full client started";
  EXPECT_EQ(warm["cicc.hit"] + warm["cicc.miss"] + warm["ptxas.hit"] + warm["host.hit"] + warm["host.miss"], 0)
      << "no step ran, nor the preprocessors before them";
  EXPECT_EQ(read_all(work / "main.d"), dependencies) << "the dependency file, as the compile wrote it";

  // Touched, the same bytes: still a hit (its digest is checked where its time changed).
  fs::last_write_time(work / "inc" / "scale.h", fs::file_time_type::clock::now());
  EXPECT_EQ(compile().first["direct.hit"], 1);

  // A changed header misses.
  std::ofstream(work / "inc" / "scale.h") << "#define SCALE 3\n";
  auto [changed, changed_says] = compile();
  EXPECT_EQ(changed["direct.hit"], 0);
  EXPECT_EQ(changed_says, "3 7\n");
  EXPECT_EQ(compile().first["direct.hit"], 1) << "and hits again";

  // A new header that shadows a listed one (a quoted include looks next to the source first).
  std::ofstream(work / "scale.h") << "#define SCALE 4\n";
  auto [shadowed, shadowed_says] = compile();
  EXPECT_EQ(shadowed["direct.hit"], 0);
  EXPECT_EQ(shadowed_says, "4 7\n");
  fs::remove(work / "scale.h");
  auto [unshadowed, unshadowed_says] = compile();
  EXPECT_EQ(unshadowed["direct.hit"], 1) << "the earlier entry holds again";
  EXPECT_EQ(unshadowed_says, "3 7\n");

  // Host-only code, under #ifndef __CUDA_ARCH__, misses.
  std::ofstream(work / "inc" / "host_only.h") << "inline int host_value() { return 8; }\n";
  auto [host_only, host_only_says] = compile();
  EXPECT_EQ(host_only["direct.hit"], 0);
  EXPECT_EQ(host_only_says, "3 8\n");
  EXPECT_EQ(host_only["cicc.hit"], 1) << "the device side did not change";

  // A -D on the command line misses.
  auto [defined, defined_says] = compile({"-DSCALE_OVERRIDE=1"});
  EXPECT_EQ(defined["direct.hit"], 0);

  // Another host compiler (the same gcc behind a wrapper of its own) misses.
  fs::remove(work / "bin" / "gcc");
  std::ofstream(work / "bin" / "gcc") << "#!/bin/sh\nexec /usr/bin/gcc \"$@\"\n";
  fs::permissions(work / "bin" / "gcc", fs::perms::owner_all);
  auto [wrapped, wrapped_says] = compile();
  EXPECT_EQ(wrapped["direct.hit"], 0);
  EXPECT_EQ(wrapped_says, "3 8\n");

  // A unit that asks for the time has no manifest: every compile runs its preprocessors.
  std::ofstream(work / "inc" / "host_only.h") << "inline int host_value() { return sizeof(__TIME__); }\n";
  auto [timed, timed_says] = compile();
  EXPECT_EQ(timed["direct.reads_the_time"], 1);
  EXPECT_EQ(timed_says, "3 9\n");
  EXPECT_EQ(compile().first["direct.hit"], 0);
}

// Direct mode with clang (`kcache clang++ -x cuda ...`): a compile seen before is answered from
// its manifest with its host object, running no preprocessor and no step, and never stale: a
// changed header, a header that shadows a listed one, host-only code and a -D each miss, and the
// object is then clang's own for the new source.
// clang's device link (-fgpu-rdc, linked with --offload-link): each arch's nvlink reaches kcache
// through a toolkit folder of its own and runs on the daemon as an nvlink step; the program is
// clang's own, byte for byte. A second link hits every nvlink; a changed device function misses
// them and gives clang's new program.
TEST_F(Launcher, AClangDeviceLinkRunsEachArchsNvlinkOnTheDaemon) {
  if (!fs::exists("/usr/bin/clang++-22")) GTEST_SKIP() << "/usr/bin/clang++-22 is absent (clang-22)";
  fs::path cudart;
  for (const char* folder : {"lib64", "targets/x86_64-linux/lib"}) {
    if (cudart.empty() && fs::exists(fs::path(KCACHE_CUDA_ROOT) / folder / "libcudart.so")) cudart = fs::path(KCACHE_CUDA_ROOT) / folder;
  }
  if (cudart.empty()) GTEST_SKIP() << "no libcudart.so under " << KCACHE_CUDA_ROOT;
  auto daemon = start_daemon("a");
  server_ = daemon->address();
  const fs::path work = m_dir.path() / "clang-rdc";
  fs::create_directories(work);
  std::ofstream(work / "main.cu") << "__device__ int step(int x);\n__global__ void k(int* x) { x[0] = step(x[0]); }\n"
                                     "int main() { k<<<1, 1>>>(nullptr); return 0; }\n";
  std::ofstream(work / "step.cu") << "__device__ int step(int x) { return x + 1; }\n";
  const std::string cuda_path = std::string("--cuda-path=") + KCACHE_CUDA_ROOT;
  auto compile = [&](const std::string& source) {
    return run_ok({KCACHE_CLI_PATH, "/usr/bin/clang++-22", "-x", "cuda", cuda_path, "--cuda-gpu-arch=sm_80",
                   "--cuda-gpu-arch=sm_90", "-fgpu-rdc", "-c", source + ".cu", "-o", source + ".o"},
                  work);
  };
  auto link = [&](bool launched, const std::string& program) {
    std::vector<std::string> argv;
    if (launched) argv.push_back(KCACHE_CLI_PATH);
    for (std::string a : {std::string("/usr/bin/clang++-22"), std::string("--offload-link"), cuda_path, std::string("main.o"),
                          std::string("step.o"), std::string("-o"), program, "-L" + cudart.string(), std::string("-lcudart")}) {
      argv.push_back(a);
    }
    return run_ok(argv, work);
  };
  ASSERT_EQ(compile("main"), 0);
  ASSERT_EQ(compile("step"), 0);
  counts();
  ASSERT_EQ(link(true, "app"), 0);
  auto cold = counts();
  EXPECT_EQ(cold["launcher.clang_device_links"], 1);
  EXPECT_EQ(cold["nvlink.miss"], 2) << "one nvlink for each arch, on the daemon";
  EXPECT_EQ(cold["nvlink.local"], 0);
  ASSERT_EQ(link(false, "plain"), 0);
  const std::string first = read_all(work / "plain");
  EXPECT_TRUE(read_all(work / "app") == first) << "not clang's program";

  fs::remove(work / "app");
  ASSERT_EQ(link(true, "app"), 0);
  auto warm = counts();
  EXPECT_EQ(warm["nvlink.hit"], 2);
  EXPECT_EQ(warm["nvlink.miss"], 0);
  EXPECT_TRUE(read_all(work / "app") == first) << "a hit gives clang's program too";

  std::ofstream(work / "step.cu") << "__device__ int step(int x) { return x + 2; }\n";
  ASSERT_EQ(compile("step"), 0);
  counts();
  ASSERT_EQ(link(true, "app"), 0);
  EXPECT_EQ(counts()["nvlink.miss"], 2) << "a changed device function links anew";
  ASSERT_EQ(link(false, "plain"), 0);
  EXPECT_TRUE(read_all(work / "app") == read_all(work / "plain")) << "clang's program for the new code";
  EXPECT_FALSE(read_all(work / "app") == first) << "and not the old one";
}

TEST_F(Launcher, AClangDirectHitRunsNoPreprocessorAndIsNeverStale) {
  if (!fs::exists("/usr/bin/clang++-22")) GTEST_SKIP() << "/usr/bin/clang++-22 is absent (clang-22)";
  auto daemon = start_daemon("a");
  server_ = daemon->address();
  const fs::path work = m_dir.path() / "clang-direct";
  fs::create_directories(work / "inc");
  std::ofstream(work / "inc" / "scale.h") << "#define SCALE 2\n";
  std::ofstream(work / "inc" / "host_only.h") << "inline int host_value() { return 7; }\n";
  std::ofstream(work / "main.cu") << "#include \"scale.h\"\n__global__ void k(int* x) { x[0] = SCALE; }\n"
                                     "#ifndef __CUDA_ARCH__\n#include \"host_only.h\"\n"
                                     "int answer() { return SCALE * 100 + host_value(); }\n#endif\n";
  auto command = [&](bool launched, const std::string& out, std::vector<std::string> extra = {}) {
    std::vector<std::string> argv;
    if (launched) argv.push_back(KCACHE_CLI_PATH);
    for (std::string a : {"/usr/bin/clang++-22", "-x", "cuda", "--cuda-gpu-arch=sm_80", "-MD", "-MF", "main.d", "-c"}) {
      argv.push_back(a);
    }
    argv.push_back(std::string("--cuda-path=") + KCACHE_CUDA_ROOT);
    argv.push_back("-I" + (work / "inc").string());
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {(work / "main.cu").string(), "-o", out});
    return argv;
  };
  // The launcher's object, its counts, and whether it is clang's own for the same command.
  auto compile = [&](std::vector<std::string> extra = {}) {
    fs::remove(work / "main.o");
    EXPECT_EQ(run_ok(command(true, "main.o", extra), work), 0);
    auto c = counts();
    EXPECT_EQ(run_ok(command(false, "plain.o", extra), work), 0);
    EXPECT_TRUE(read_all(work / "main.o") == read_all(work / "plain.o")) << "not clang's object for this source";
    return c;
  };
  counts();
  auto cold = compile();
  EXPECT_EQ(cold["direct.recorded"], 1);
  EXPECT_EQ(cold["clang.miss"], 1);
  const std::string dependencies = read_all(work / "main.d");
  EXPECT_NE(dependencies.find("host_only.h"), std::string::npos) << "the host side's headers are listed";

  auto warm = compile();
  EXPECT_EQ(warm["direct.hit"], 1);
  EXPECT_EQ(warm["host.hit"] + warm["host.local_hit"], 1);
  EXPECT_EQ(warm["clang.hit"] + warm["clang.miss"] + warm["ptxas.hit"] + warm["ptxas.miss"] + warm["host.miss"], 0)
      << "no step ran, nor the preprocessors before them";
  EXPECT_EQ(read_all(work / "main.d"), dependencies) << "the dependency file, as the compile wrote it";

  std::ofstream(work / "inc" / "scale.h") << "#define SCALE 3\n";
  EXPECT_EQ(compile()["direct.hit"], 0) << "a changed header";
  EXPECT_EQ(compile()["direct.hit"], 1) << "and hits again";

  std::ofstream(work / "scale.h") << "#define SCALE 4\n";
  EXPECT_EQ(compile()["direct.hit"], 0) << "a header next to the source, which a quoted include finds first";
  fs::remove(work / "scale.h");
  EXPECT_EQ(compile()["direct.hit"], 1) << "the earlier entry holds again";

  std::ofstream(work / "inc" / "host_only.h") << "inline int host_value() { return 8; }\n";
  auto host_only = compile();
  EXPECT_EQ(host_only["direct.hit"], 0) << "host-only code";
  EXPECT_EQ(host_only["clang.hit"], 1) << "the device side did not change";

  EXPECT_EQ(compile({"-DSCALE_OVERRIDE=1"})["direct.hit"], 0) << "a -D";
}

// Single nvcc commands of the shapes builds send: the same object as nvcc's but for nvcc's
// temporary name, an options file, spaces and a quote in paths (a double quote in a folder's
// name breaks nvcc 13 itself: its PTX then fails to parse), a failing compile (nvcc's
// diagnostics and exit code, nothing stored), a launcher killed part-way (no object; its work
// folder removed by a later launch), and what the launcher does not take (counted by reason).
// Only daemons and publish clients write what other machines link. Two machines with the compile
// role build the same file at the same path: the host object is compiled by the daemon from the
// launcher's text (byte for byte what nvcc makes) and the second machine's build takes it; the
// whole compile's object, which only the first build could vouch for, is kept from the daemon;
// and each program runs its own code. (Replaying a look-up with a planted object is refused:
// Tokens.OnlyAPublishClientWritesWhatOtherMachinesLink.)
TEST_F(Launcher, ACompileClientsHostObjectIsTheDaemonsAndNoneOfItsOwnIsShared) {
  const fs::path tokens = m_dir.path() / "tokens";
  std::ofstream(tokens) << "alice compile alice-token-0123456789abcdef\nbob compile bob-token-0123456789abcdef\n";
  fs::permissions(tokens, fs::perms::owner_read | fs::perms::owner_write);
  auto daemon = start_daemon("a", {"--tokens-file", tokens.string()});
  server_ = daemon->address();
  const fs::path work = m_dir.path() / "w";
  fs::create_directories(work);
  std::ofstream(work / "main.cu") << "#include <cstdio>\n__global__ void k(int* x) { x[0] = 1; }\n"
                                     "int main() { std::printf(\"own code\\n\"); return 0; }\n";
  const std::vector<std::string> compile = {KCACHE_CLI_PATH, nvcc_.string(), "-arch=sm_80", "-c", "main.cu", "-o", "main.o"};
  const std::vector<std::string> link = {nvcc_.string(), "-arch=sm_80", "main.o", "-o", "prog"};
  struct Token {
    Token(const char* t) { ::setenv("KCACHE_TOKEN", t, 1); }
    ~Token() { ::unsetenv("KCACHE_TOKEN"); }
  };
  counts();
  {
    Token alice("alice-token-0123456789abcdef");
    ASSERT_EQ(run_ok(compile, work), 0);
  }
  auto first = counts();
  EXPECT_EQ(first["host.compiled_by_daemon"], 1);
  EXPECT_EQ(first["nvcc.unpublished"], 1) << "a compile client's whole-compile object stays its own";
  ASSERT_EQ(run_ok(link, work), 0);
  EXPECT_EQ(run({(work / "prog").string()}).output, "own code\n");
  std::string alices = read_all(work / "main.o");

  // Alice's machine keeps its own whole compile: her warm rebuild takes it from there.
  fs::remove(work / "main.o");
  {
    Token alice("alice-token-0123456789abcdef");
    ASSERT_EQ(run_ok(compile, work), 0);
  }
  auto warm = counts();
  EXPECT_EQ(warm["nvcc.local_hit"], 1);
  EXPECT_EQ(warm["host.hit"] + warm["host.miss"] + warm["cicc.hit"] + warm["cicc.miss"], 0);
  EXPECT_TRUE(read_all(work / "main.o") == alices);

  // Bob's machine has none of Alice's own objects (its local store is off here).
  fs::remove(work / "main.o");
  fs::remove(work / "prog");
  {
    Token bob("bob-token-0123456789abcdef");
    ::setenv("KCACHE_LOCAL_OBJECTS_SIZE", "0", 1);
    ASSERT_EQ(run_ok(compile, work), 0);
    ::unsetenv("KCACHE_LOCAL_OBJECTS_SIZE");
  }
  auto second = counts();
  EXPECT_EQ(second["nvcc.miss"], 1) << "no whole-compile entry from a compile client";
  EXPECT_EQ(second["host.hit"], 1) << "the daemon's host object is everyone's";
  EXPECT_EQ(second["cicc.hit"], 1);
  EXPECT_TRUE(read_all(work / "main.o") == alices);
  ASSERT_EQ(run_ok(link, work), 0);
  EXPECT_EQ(run({(work / "prog").string()}).output, "own code\n");
}

TEST_F(Launcher, OddCommandsGiveWhatNvccGives) {
  auto daemon = start_daemon("a");
  server_ = daemon->address();
  fs::path work = m_dir.path() / "odd dir";
  fs::create_directories(work / "it's odd");
  // With a warning from the preprocessors and one from cudafe++ and cicc (an unused variable).
  std::string kernel = "#warning \"from the source\"\n" + read_all(src_ / "src" / "stencil.cu") +
                       "\n__global__ void odd_unused(int* x) { int unused = 3; x[0] = 1; }\n";
  std::ofstream(work / "it's odd" / "my kernel.cu") << kernel;
  std::string include = "-I" + (src_ / "include").string();
  std::vector<std::string> common = {include, "--extended-lambda", "-arch=sm_80", "-c", "it's odd/my kernel.cu"};
  std::vector<std::string> launched = {KCACHE_CLI_PATH, nvcc_.string()};
  launched.insert(launched.end(), common.begin(), common.end());
  std::vector<std::string> plain = {nvcc_.string()};
  plain.insert(plain.end(), common.begin(), common.end());

  // The same bytes as nvcc's object once nvcc's temporary name (tmpxft_<pid>_<n>) is written as
  // the launcher writes it.
  auto with_output = [](std::vector<std::string> argv, const std::string& out) {
    argv.push_back("-o");
    argv.push_back(out);
    return argv;
  };
  counts();
  auto launched_run = run(with_output(launched, "k.o"), work);
  auto plain_run = run(with_output(plain, "n.o"), work);
  ASSERT_EQ(launched_run.exit_code, 0) << launched_run.error_output;
  ASSERT_EQ(plain_run.exit_code, 0) << plain_run.error_output;
  auto launched_counts = counts();
  EXPECT_EQ(launched_counts["cicc.miss"], 1) << "the spaces and quotes stayed a cacheable compile";
  EXPECT_EQ(launched_counts["nvcc.miss"], 1);
  std::string ours = read_all(work / "k.o"), theirs = read_all(work / "n.o");
  ASSERT_FALSE(ours.empty());
  for (std::size_t at = theirs.find("tmpxft_"); at != std::string::npos; at = theirs.find("tmpxft_", at + 1)) {
    theirs.replace(at + 7, 17, "00000000_00000000");
  }
  EXPECT_TRUE(ours == theirs) << "the launcher's object differs from nvcc's beyond its temporary name";
  // A miss prints nvcc's diagnostics, in nvcc's order.
  EXPECT_NE(plain_run.error_output.find("#177-D"), std::string::npos) << plain_run.error_output;
  EXPECT_EQ(launched_run.error_output, plain_run.error_output);

  // Again: the whole compile hits, no step past the preprocessors runs, and the bytes are the
  // same. What the compile printed comes again: this run's preprocessors' warnings (a #warning is
  // not in their texts, so it is never taken from the entry), then what cudafe++ and cicc printed,
  // kept with the object.
  auto hit = run(with_output(launched, "k2.o"), work);
  ASSERT_EQ(hit.exit_code, 0) << hit.error_output;
  auto again = counts();
  EXPECT_EQ(again["nvcc.hit"] + again["nvcc.local_hit"], 1);
  EXPECT_EQ(again["cicc.hit"] + again["cicc.miss"] + again["ptxas.hit"] + again["host.hit"] + again["host.miss"], 0);
  EXPECT_TRUE(read_all(work / "k2.o") == ours) << "the whole compile's hit differs from its miss";
  auto lines_of = [](const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    std::sort(lines.begin(), lines.end());
    return lines;
  };
  EXPECT_EQ(lines_of(hit.error_output), lines_of(plain_run.error_output)) << hit.error_output;
  EXPECT_LT(hit.error_output.find("#warning"), hit.error_output.find("#177-D")) << "the preprocessors' warnings first";

  // -g: the host compile's debug info names the work folder, so no whole compile is looked up or
  // kept; the host compile runs here, as before.
  auto debug_argv = with_output(launched, "g.o");
  debug_argv.insert(debug_argv.begin() + 2, "-g");
  ASSERT_EQ(run_ok(debug_argv, work), 0);
  auto debug = counts();
  EXPECT_EQ(debug["nvcc.hit"] + debug["nvcc.miss"], 0);
  EXPECT_EQ(debug["host.local"], 1);

  // An options file (CMake's response files for long command lines) is read as nvcc reads it.
  std::ofstream(work / "opts.txt") << "-O3\n-DFIXTURE_OPT=1 -lineinfo\n";
  auto opt = with_output(launched, "o.o");
  opt.insert(opt.begin() + 2, {"--options-file", "opts.txt"});
  ASSERT_EQ(run_ok(opt, work), 0);
  auto opt_counts = counts();
  EXPECT_EQ(opt_counts["cicc.miss"], 1) << "-lineinfo and -O3 make another step";
  EXPECT_EQ(opt_counts["launcher.compiles"], 1);

  // A failing compile: nvcc's diagnostics and exit code; nothing of it stored.
  // Broken where only the device passes look, so cicc is the step that fails.
  std::ofstream(work / "broken.cu") << "#ifdef __CUDA_ARCH__\n__device__ int f() { return undefined_name; }\n#endif\n"
                                       "__global__ void k(int* x) { x[0] = 1; }\n";
  auto ours_failed = run({KCACHE_CLI_PATH, nvcc_.string(), "-arch=sm_80", "-c", "broken.cu", "-o", "b.o"}, work);
  auto nvcc_failed = run({nvcc_.string(), "-arch=sm_80", "-c", "broken.cu", "-o", "b.o"}, work);
  EXPECT_NE(nvcc_failed.exit_code, 0);
  EXPECT_EQ(ours_failed.exit_code, nvcc_failed.exit_code);
  EXPECT_EQ(ours_failed.error_output, nvcc_failed.error_output);
  EXPECT_FALSE(fs::exists(work / "b.o"));
  EXPECT_EQ(counts()["launcher.failed"], 1);

  // Killed part-way: no object, not even part of one. A -D of its own makes it a miss, so its
  // plan runs for seconds (a hit is done about 0.4 s after its folder appears).
  std::vector<std::string> killed_argv = with_output(launched, "killed.o");
  killed_argv.push_back("-DKCACHE_TEST_KILLED=1");
  std::vector<std::string> killed_env = {"PATH=/usr/bin:/bin", "KCACHE_SERVER=" + server_,
                                         "KCACHE_STATE_DIR=" + (m_dir.path() / "state").string()};
  std::vector<char*> args, envp;
  for (std::string& a : killed_argv) args.push_back(a.data());
  args.push_back(nullptr);
  for (std::string& e : killed_env) envp.push_back(e.data());
  envp.push_back(nullptr);
  // In a process group of its own, killed whole as Ctrl-C would: nvcc's programs that the launch
  // started die with it, and none writes into its folder after.
  pid_t pid = fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    if (::chdir(work.c_str()) == 0) ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // as the child does, whichever runs first
  // Its work folder, kcache-cc-<pid>-XXXXXX, is made before nvcc's plan runs.
  const std::string killed_prefix = "kcache-cc-" + std::to_string(pid) + "-";
  auto work_folders_of = [&](const std::string& prefix) {
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(fs::temp_directory_path())) {
      if (e.path().filename().string().starts_with(prefix)) found.push_back(e.path());
    }
    return found;
  };
  // Killed once nvcc's plan has written into its folder (the preprocessors' first output).
  EXPECT_TRUE(poll_until(
      [&] {
        std::vector<fs::path> folders = work_folders_of(killed_prefix);
        std::error_code ec;
        return !folders.empty() && !fs::is_empty(folders[0], ec);
      },
      30s));
  ::kill(-pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_FALSE(fs::exists(work / "killed.o"));
  counts();

  // The killed launch could not remove its folder (nvcc's preprocessed files, megabytes). A later
  // launch removes it once its pid is gone and nothing in it changed for an hour (made so here);
  // a folder of a live launch, or one touched within the hour, stays.
  std::vector<fs::path> abandoned = work_folders_of(killed_prefix);
  ASSERT_EQ(abandoned.size(), 1u);
  const auto two_hours_ago = fs::file_time_type::clock::now() - std::chrono::hours(2);
  fs::last_write_time(abandoned[0], two_hours_ago);
  fs::path live = fs::temp_directory_path() / ("kcache-cc-" + std::to_string(::getpid()) + "-live");
  fs::path recent = fs::temp_directory_path() / (killed_prefix + "recent");
  fs::create_directories(live);
  fs::create_directories(recent);
  fs::last_write_time(live, two_hours_ago);

  // What the launcher does not take runs nvcc unchanged, counted by reason, here and on the daemon.
  ASSERT_EQ(run_ok({KCACHE_CLI_PATH, nvcc_.string(), include, "--extended-lambda", "-arch=sm_80", "-E",
                    "it's odd/my kernel.cu", "-o", "pre.ii"},
                   work),
            0);
  EXPECT_TRUE(fs::file_size(work / "pre.ii") > 0);
  EXPECT_EQ(counts()["uncacheable.option_-E"], 1);
  EXPECT_FALSE(fs::exists(abandoned[0])) << "the killed launch's work folder is still there";
  EXPECT_TRUE(fs::exists(live)) << "a live launch's folder was removed";
  EXPECT_TRUE(fs::exists(recent)) << "a folder touched within the hour was removed";
  fs::remove_all(live);
  fs::remove_all(recent);
  Client client(ClientOptions{daemon->address(), std::chrono::seconds(30)});
  auto stats = client.stats();
  ASSERT_TRUE(stats);
  bool reported = false;
  for (const auto& r : stats->uncacheable()) reported |= r.reason() == "option -E" && r.count() == 1;
  EXPECT_TRUE(reported) << "the daemon counts the launcher's reason";
  bool counted_failure = false;
  for (const auto& s : stats->steps()) counted_failure |= s.tool() == "cicc" && s.failed() >= 1;
  EXPECT_TRUE(counted_failure) << "the failed cicc step is counted, and was not stored";
}

// Single clang commands: a response file and a path with spaces and a quote give plain clang's
// object; a failing device compile gives clang's diagnostics and exit code and stores nothing;
// a C++ compile is not kcache's and runs clang in the launcher's place.
TEST_F(Launcher, OddClangCommandsGiveWhatClangGives) {
  if (!fs::exists("/usr/bin/clang++-22")) GTEST_SKIP() << "clang++-22 is absent (clang-22)";
  auto daemon = start_daemon("a");
  server_ = daemon->address();
  fs::path work = m_dir.path() / "odd dir";
  fs::create_directories(work / "it's odd");
  std::ofstream(work / "it's odd" / "my kernel.cu") << read_all(src_ / "src" / "stencil.cu");
  std::ofstream(work / "opts.rsp") << "-O3 \"-I" << (src_ / "include").string() << "\"\n-DFIXTURE_OPT=1\n";
  const std::vector<std::string> common = {"-x", "cuda", std::string("--cuda-path=") + KCACHE_CUDA_ROOT,
                                           "--cuda-gpu-arch=sm_80", "@opts.rsp", "-c", "it's odd/my kernel.cu", "-o"};
  auto command = [&](bool launched, const std::string& out) {
    std::vector<std::string> argv;
    if (launched) argv.push_back(KCACHE_CLI_PATH);
    argv.push_back("/usr/bin/clang++-22");
    argv.insert(argv.end(), common.begin(), common.end());
    argv.push_back(out);
    return argv;
  };
  counts();
  ASSERT_EQ(run_ok(command(true, "k.o"), work), 0);
  ASSERT_EQ(run_ok(command(false, "c.o"), work), 0);
  auto first = counts();
  EXPECT_EQ(first["clang.miss"], 1) << "the response file and the odd path stayed a cacheable compile";
  EXPECT_EQ(first["host.miss"], 1);
  std::string ours = read_all(work / "k.o");
  ASSERT_FALSE(ours.empty());
  EXPECT_TRUE(ours == read_all(work / "c.o")) << "the launcher's object differs from clang's (this file has no static "
                                                 "device variable, so clang's -cuid= names nothing in it)";
  ASSERT_EQ(run_ok(command(true, "k2.o"), work), 0);
  auto again = counts();
  EXPECT_EQ(again["direct.hit"], 1) << "answered from its manifest: no preprocessor or step ran";
  EXPECT_EQ(again["host.hit"] + again["host.local_hit"], 1);
  EXPECT_EQ(again["clang.hit"] + again["clang.miss"] + again["ptxas.hit"] + again["ptxas.miss"], 0);
  EXPECT_TRUE(read_all(work / "k2.o") == ours);

  // Broken where only the device side looks: clang's own diagnostics and exit code, nothing kept.
  std::ofstream(work / "broken.cu") << "#ifdef __CUDA_ARCH__\n__device__ int f() { return undefined_name; }\n#endif\n"
                                       "__global__ void k(int* x) { x[0] = 1; }\n";
  std::vector<std::string> broken = {"/usr/bin/clang++-22", "-x", "cuda", std::string("--cuda-path=") + KCACHE_CUDA_ROOT,
                                     "--cuda-gpu-arch=sm_80", "-c", "broken.cu", "-o", "b.o"};
  auto plain_failed = run(broken, work);
  broken.insert(broken.begin(), KCACHE_CLI_PATH);
  auto ours_failed = run(broken, work);
  EXPECT_NE(plain_failed.exit_code, 0);
  EXPECT_EQ(ours_failed.exit_code, plain_failed.exit_code);
  EXPECT_EQ(ours_failed.error_output, plain_failed.error_output);
  EXPECT_FALSE(fs::exists(work / "b.o"));
  EXPECT_EQ(counts()["launcher.failed"], 1);

  // Plain C++ through the launcher: clang runs as it would.
  std::ofstream(work / "plain.cpp") << "int answer() { return 42; }\n";
  ASSERT_EQ(run_ok({KCACHE_CLI_PATH, "/usr/bin/clang++-22", "-c", "plain.cpp", "-o", "plain.o"}, work), 0);
  EXPECT_TRUE(fs::exists(work / "plain.o"));
  EXPECT_EQ(counts()["uncacheable.compiler_clang++-22"], 1);
}

}  // namespace
}  // namespace kcache::test
