// Toolchain detection's reuse of what programs answered (ToolRuns): kcached hands its workers
// the answers of ptxas and ld.lld, and a worker asks a program again whenever its file is no
// longer the one that answered, so a toolkit changed under the daemon is still seen.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <algorithm>

#include "compile/toolchain.hpp"
#include "test_support.hpp"

namespace kcache::server {
namespace {

// Writes an executable shell script at `path` by renaming a new file over it, as a package
// upgrade replaces a program.
void install_script(const std::filesystem::path& path, const std::string& body) {
  std::filesystem::path tmp = path;
  tmp += ".new";
  test::write_file(tmp, "#!/bin/sh\n" + body);
  ASSERT_EQ(::chmod(tmp.c_str(), 0755), 0);
  std::filesystem::rename(tmp, path);
}

// A program that says `answer` and leaves a line in `log` each time it runs.
std::string answering(const std::string& answer, const std::filesystem::path& log) {
  return "echo ran >> '" + log.string() + "'\necho '" + answer + "'\n";
}

std::size_t lines(const std::filesystem::path& path) {
  std::string text = test::read_file(path);
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

Expected<ProcessResult> ask(ToolRuns& runs, const std::filesystem::path& program) {
  return runs.ask(program, "--version", [&] { return run_process({program.string(), "--version"}); });
}

TEST(ToolRuns, AKnownAnswerOfTheSameFileIsReusedWithoutRunningIt) {
  test::TempDir dir;
  std::filesystem::path tool = dir.path() / "tool", log = dir.path() / "runs";
  install_script(tool, answering("tool 1.0", log));
  ToolRuns daemon;
  auto first = ask(daemon, tool);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->output, "tool 1.0\n");
  EXPECT_EQ(lines(log), 1u);

  ToolRuns worker(daemon.runs());
  auto again = ask(worker, tool);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->output, "tool 1.0\n");
  EXPECT_EQ(again->exit_code, 0);
  EXPECT_EQ(lines(log), 1u) << "the known answer was not reused";
  // Another question to the same program is asked.
  auto help = worker.ask(tool, "--help", [&] { return run_process({tool.string(), "--help"}); });
  ASSERT_TRUE(help) << help.error().message;
  EXPECT_EQ(lines(log), 2u);
}

TEST(ToolRuns, AProgramReplacedOrRewrittenIsAskedAgain) {
  test::TempDir dir;
  std::filesystem::path tool = dir.path() / "tool", log = dir.path() / "runs";
  install_script(tool, answering("tool 1.0", log));
  ToolRuns daemon;
  ASSERT_TRUE(ask(daemon, tool));

  install_script(tool, answering("tool 2.0", log));  // a new file (inode) in its place
  ToolRuns replaced(daemon.runs());
  auto answer = ask(replaced, tool);
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->output, "tool 2.0\n");
  EXPECT_EQ(lines(log), 2u);

  // The same file rewritten in place (same inode): its size and times change.
  test::write_file(tool, "#!/bin/sh\n" + answering("tool 3.0.1", log));
  ToolRuns rewritten(replaced.runs());
  answer = ask(rewritten, tool);
  ASSERT_TRUE(answer) << answer.error().message;
  EXPECT_EQ(answer->output, "tool 3.0.1\n");
  EXPECT_EQ(lines(log), 3u);
}

// Detection end to end, on a CUDA root whose ptxas is a script in front of the real one.
TEST(ToolRuns, AWorkersDetectionRunsNoUnchangedProgramAndSeesAChangedPtxas) {
  std::filesystem::path real = test::ptxas_path();
  if (real.empty()) GTEST_SKIP() << "no CUDA toolkit: /usr/local/cuda/bin/ptxas is absent";
  test::TempDir dir;
  std::filesystem::path root = dir.path() / "cuda", log = dir.path() / "runs";
  std::filesystem::create_directories(root / "bin");
  install_script(root / "bin" / "ptxas", "echo ran >> '" + log.string() + "'\nexec '" + real.string() + "' \"$@\"\n");

  ToolRuns daemon;
  Toolchain first = detect_toolchain(root, CubinAssembler::ptxas, ToolkitLibraries::load, {}, &daemon);
  ASSERT_TRUE(first.cuda_present);
  ASSERT_GT(first.max_ptx_version, 0);
  const std::size_t runs = lines(log);
  EXPECT_GE(runs, 3u);  // --version, --help, a probe at least

  ToolRuns worker(daemon.runs());
  Toolchain second = detect_toolchain(root, CubinAssembler::ptxas, ToolkitLibraries::load, {}, &worker);
  EXPECT_EQ(lines(log), runs) << "a worker ran ptxas again though it had not changed";
  EXPECT_EQ(second.fingerprint, first.fingerprint);
  EXPECT_EQ(second.ptxas_version, first.ptxas_version);
  EXPECT_EQ(second.cubin_archs, first.cubin_archs);
  EXPECT_EQ(second.max_ptx_version, first.max_ptx_version);

  // Another ptxas release in its place: asked again, and the fingerprint differs.
  install_script(root / "bin" / "ptxas", "if [ \"$1\" = --version ]; then '" + real.string() +
                                             "' --version | sed 's/, V/, V1/'; exit; fi\nexec '" + real.string() +
                                             "' \"$@\"\n");
  ToolRuns changed(daemon.runs());
  Toolchain third = detect_toolchain(root, CubinAssembler::ptxas, ToolkitLibraries::load, {}, &changed);
  EXPECT_NE(third.ptxas_version, first.ptxas_version);
  EXPECT_NE(third.fingerprint, first.fingerprint);
}

}  // namespace
}  // namespace kcache::server
