// kcache as the CUDA compiler launcher (client/cli/launcher/), on the CMake project of
// tests/data/launcher (12 CUDA files: templates, a shared header, host-only code under
// #ifndef __CUDA_ARCH__, relocatable device code, two archs), built with nvcc through
// CMAKE_CUDA_COMPILER_LAUNCHER against a real kcached. The launcher's own counters
// (KCACHE_STATE_DIR/launcher-stats) say which steps hit, missed or ran here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "daemon_fixture.hpp"
#include "kcache/process.hpp"
#include "test_paths.hpp"

extern char** environ;

namespace kcache::test {
namespace {

namespace fs = std::filesystem;

class Launcher : public DaemonTest {
 protected:
  void SetUp() override {
    nvcc_ = fs::path(KCACHE_CUDA_ROOT) / "bin" / "nvcc";
    if (!fs::exists(nvcc_)) GTEST_SKIP() << "no CUDA toolkit at " << KCACHE_CUDA_ROOT << " (nvcc): nothing to launch";
    for (const char* tool : {"/usr/bin/cmake", "/usr/bin/ninja"}) {
      if (!fs::exists(tool)) GTEST_SKIP() << tool << " is absent";
    }
    DaemonTest::SetUp();
    src_ = m_dir.path() / "src";
    fs::copy(fs::path(KCACHE_TEST_DATA_DIR) / "launcher", src_, fs::copy_options::recursive);
  }

  // Runs a command with the launcher's environment; its exit code, output kept for failures.
  int run(const std::vector<std::string>& argv, std::string* output = nullptr) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string_view v(*e);
      if (!v.starts_with("KCACHE_SERVER=") && !v.starts_with("KCACHE_STATE_DIR=")) env.emplace_back(v);
    }
    env.push_back("KCACHE_SERVER=" + server_);
    env.push_back("KCACHE_STATE_DIR=" + (m_dir.path() / "state").string());
    ProcessOptions options;
    options.env = &env;
    auto ran = run_process(argv, options);
    if (!ran) {
      ADD_FAILURE() << ran.error().message;
      return -1;
    }
    if (output) *output = ran->output;
    if (ran->exit_code != 0) std::cerr << ran->output;
    return ran->exit_code;
  }

  // The launcher's counters since the last call.
  std::map<std::string, long> counts() {
    std::map<std::string, long> now, delta;
    std::ifstream in(m_dir.path() / "state" / "launcher-stats");
    std::string name;
    long value = 0;
    while (in >> name >> value) now[name] = value;
    for (const auto& [n, v] : now) {
      if (v != seen_[n]) delta[n] = v - seen_[n];
    }
    seen_ = now;
    return delta;
  }

  int build() { return run({"/usr/bin/ninja", "-C", (m_dir.path() / "build").string()}); }

  std::string program_output() {
    std::string out;
    EXPECT_EQ(run({(m_dir.path() / "build" / "fixture").string()}, &out), 0);
    return out;
  }

  void set_banner(const std::string& from, const std::string& to) {
    fs::path file = src_ / "src" / "banner.cu";
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    std::string s = text.str();
    auto at = s.find(from);
    ASSERT_NE(at, std::string::npos);
    s.replace(at, from.size(), to);
    std::ofstream(file) << s;
  }

  fs::path nvcc_, src_;
  std::string server_;
  std::map<std::string, long> seen_;
};

TEST_F(Launcher, ACmakeBuildSharesEveryStepRebuildsNothingAndNeverServesAStaleObject) {
  server_ = m_daemon->address();
  ASSERT_EQ(run({"/usr/bin/cmake", "-S", src_.string(), "-B", (m_dir.path() / "build").string(), "-G", "Ninja",
                 "-DCMAKE_CUDA_COMPILER=" + nvcc_.string(), std::string("-DCMAKE_CUDA_COMPILER_LAUNCHER=") + KCACHE_CLI_PATH}),
            0);
  counts();

  // Cold: every arch's cicc and ptxas runs on the daemon, every host compile here.
  ASSERT_EQ(build(), 0);
  auto cold = counts();
  EXPECT_EQ(cold["launcher.compiles"], 12);
  EXPECT_EQ(cold["cicc.miss"], 24) << "12 files x 2 archs";
  EXPECT_EQ(cold["ptxas.miss"], 24);
  EXPECT_EQ(cold["host.miss"], 12);
  EXPECT_EQ(cold["cicc.local"] + cold["ptxas.local"] + cold["host.local"], 0);
  EXPECT_EQ(program_output(), "fixture banner v1\nno note\n");
  std::ifstream first_program(m_dir.path() / "build" / "fixture", std::ios::binary);
  std::string cold_bytes((std::istreambuf_iterator<char>(first_program)), std::istreambuf_iterator<char>());

  // Warm, after ninja clean: no cicc, ptxas or host compile runs; the same program, byte for byte.
  ASSERT_EQ(run({"/usr/bin/ninja", "-C", (m_dir.path() / "build").string(), "clean"}), 0);
  ASSERT_EQ(build(), 0);
  auto warm = counts();
  EXPECT_EQ(warm["cicc.hit"], 24);
  EXPECT_EQ(warm["ptxas.hit"], 24);
  EXPECT_EQ(warm["host.hit"], 12);
  EXPECT_EQ(warm["cicc.miss"] + warm["ptxas.miss"] + warm["host.miss"], 0);
  std::ifstream second_program(m_dir.path() / "build" / "fixture", std::ios::binary);
  std::string warm_bytes((std::istreambuf_iterator<char>(second_program)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(warm_bytes == cold_bytes) << "the rebuilt program differs from the first";

  // A change to host-only code under #ifndef __CUDA_ARCH__: the device passes see the same text
  // (their steps hit), the host compile misses, and the program prints the new string.
  set_banner("fixture banner v1", "fixture banner v2");
  ASSERT_EQ(build(), 0);
  auto host_change = counts();
  EXPECT_EQ(host_change["launcher.compiles"], 1);
  EXPECT_EQ(host_change["host.miss"], 1);
  EXPECT_EQ(host_change["cicc.hit"], 2);
  EXPECT_EQ(program_output(), "fixture banner v2\nno note\n");

  // The daemon down: the build still succeeds, every step runs here.
  m_daemon->stop();
  set_banner("fixture banner v2", "fixture banner v3");
  ASSERT_EQ(build(), 0);
  auto down = counts();
  EXPECT_EQ(down["launcher.daemon_unreachable"], 1);
  EXPECT_EQ(down["cicc.local"], 2);
  EXPECT_EQ(program_output(), "fixture banner v3\nno note\n");
}

}  // namespace
}  // namespace kcache::test
