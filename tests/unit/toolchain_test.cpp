// Toolchain detection's reuse of what programs answered (ToolRuns): kcached hands its workers
// the answers of ptxas and ld.lld, and a worker asks a program again whenever its file is no
// longer the one that answered, so a toolkit changed under the daemon is still seen. And the
// digest of the toolkit's headers, which every daemon and worker start computes.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "compile/tool_step.hpp"
#include "compile/toolchain.hpp"
#include "kcache/search_path.hpp"
#include "kcache/step.hpp"
#include "launcher/nvcc_plan.hpp"
#include "kcache/headers_digest.hpp"
#include "kcache/sha256.hpp"
#include "test_paths.hpp"
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
  EXPECT_EQ(runs, 3u) << "--version, --help and --list-version, each once";

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

// kcached's detection asks ptxas's questions at once, not one after another (a start of kcached
// waited for each in turn): here `ptxas --version` answers only once `--help` has started beside
// it, or after 5 s alone, which it logs.
TEST(ToolRuns, DetectionAsksItsQuestionsAtOnce) {
  std::filesystem::path real = test::ptxas_path();
  if (real.empty()) GTEST_SKIP() << "no CUDA toolkit: /usr/local/cuda/bin/ptxas is absent";
  test::TempDir dir;
  std::filesystem::path root = dir.path() / "cuda", log = dir.path() / "log", help = dir.path() / "help-started";
  std::filesystem::create_directories(root / "bin");
  install_script(root / "bin" / "ptxas",
                 "if [ \"$1\" = --help ]; then touch '" + help.string() + "'; fi\n"
                 "if [ \"$1\" = --version ]; then\n"
                 "  i=0; while [ ! -e '" + help.string() + "' ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done\n"
                 "  [ -e '" + help.string() + "' ] || echo alone >> '" + log.string() + "'\n"
                 "fi\n"
                 "exec '" + real.string() + "' \"$@\"\n");
  Toolchain t = detect_toolchain(root, CubinAssembler::ptxas, ToolkitLibraries::by_workers);
  EXPECT_TRUE(t.cuda_present);
  EXPECT_FALSE(std::filesystem::exists(log)) << "ptxas --version ran alone: detection asked one question at a time";
}

// The newest PTX ISA both sides take comes from `ptxas --list-version`, in one run and without
// compiling a probe; a ptxas without that option (or that lists something else) is probed with
// empty modules instead, to the same answer.
TEST(ToolRuns, ThePtxIsaComesFromPtxasListOrElseFromProbingIt) {
  std::filesystem::path real = test::ptxas_path();
  if (real.empty()) GTEST_SKIP() << "no CUDA toolkit: /usr/local/cuda/bin/ptxas is absent";
  test::TempDir dir;
  std::filesystem::path root = dir.path() / "cuda", log = dir.path() / "args";
  std::filesystem::create_directories(root / "bin");
  const std::string logged = "echo \"$*\" >> '" + log.string() + "'\n";
  install_script(root / "bin" / "ptxas", logged + "exec '" + real.string() + "' \"$@\"\n");
  Toolchain listed = detect_toolchain(root, CubinAssembler::ptxas, ToolkitLibraries::by_workers);
  ASSERT_GT(listed.max_ptx_version, 0);
  std::string args = test::read_file(log);
  EXPECT_NE(args.find("--list-version"), std::string::npos) << args;
  EXPECT_EQ(args.find("-arch=sm_75"), std::string::npos) << "a probe ran though ptxas listed its versions:\n" << args;

  for (const std::string& listing : {std::string("exit 1"), std::string("echo 'PTX ISA 9.0'; exit 0")}) {
    std::filesystem::remove(log);
    install_script(root / "bin" / "ptxas", logged + "if [ \"$1\" = --list-version ]; then " + listing + "; fi\nexec '" +
                                               real.string() + "' \"$@\"\n");
    Toolchain probed = detect_toolchain(root, CubinAssembler::ptxas, ToolkitLibraries::by_workers);
    EXPECT_EQ(probed.max_ptx_version, listed.max_ptx_version) << "with --list-version answering: " << listing;
    EXPECT_NE(test::read_file(log).find("-arch=sm_75"), std::string::npos) << "no probe ran: " << listing;
  }
}

// The digest as std::filesystem describes the folders: each one's regular files (links to files
// by their target, links to folders not entered), named from that folder, with size and mtime,
// sorted. cuda_headers_digest walks with descriptors and reuses a nested folder's walk; it must
// still give this, or every NVRTC key would change.
std::string digest_by_std_filesystem(const std::vector<std::filesystem::path>& dirs) {
  std::vector<std::string> lines;
  for (const auto& dir : dirs) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
      if (!entry.is_regular_file()) continue;
      lines.push_back(dir.filename().string() + "/" + entry.path().lexically_relative(dir).string() + " " +
                      std::to_string(entry.file_size()) + " " +
                      std::to_string(entry.last_write_time().time_since_epoch().count()));
    }
  }
  std::sort(lines.begin(), lines.end());
  Sha256 h;
  for (const auto& line : lines) {
    h.update(line);
    h.update(std::string_view("\n"));
  }
  return to_hex(h.finish());
}

TEST(CudaHeadersDigest, NamesEachFoldersFilesAsStdFilesystemFindsThemAndSeesAnEditedHeader) {
  test::TempDir dir;
  std::filesystem::path include = dir.path() / "include", cccl = include / "cccl";
  std::filesystem::create_directories(cccl / "cuda" / "std");
  std::filesystem::create_directories(include / "crt");
  std::filesystem::create_directories(dir.path() / "elsewhere");
  test::write_file(include / "cuda_runtime.h", "#pragma once\n");
  test::write_file(include / "crt" / "host_defines.h", "#define __host__\n");
  test::write_file(cccl / "cuda" / "std" / "atomic", "// atomic\n");
  test::write_file(cccl / "cub.cuh", "// cub\n");
  test::write_file(dir.path() / "elsewhere" / "not_walked.h", "// behind a link to a folder\n");
  std::filesystem::create_symlink(include / "cuda_runtime.h", include / "cuda_runtime_api.h");
  std::filesystem::create_symlink(dir.path() / "elsewhere", include / "linked_folder");
  std::filesystem::create_symlink(dir.path() / "missing.h", include / "dangling.h");
  const std::vector<std::filesystem::path> dirs = {include, cccl};

  std::string digest = cuda_headers_digest(dirs);
  EXPECT_EQ(digest, digest_by_std_filesystem(dirs));
  EXPECT_EQ(digest.size(), 64u);

  // A header's size, then its time alone: another digest each time.
  test::write_file(cccl / "cub.cuh", "// cub, longer\n");
  std::string edited = cuda_headers_digest(dirs);
  EXPECT_NE(edited, digest);
  EXPECT_EQ(edited, digest_by_std_filesystem(dirs));
  auto when = std::filesystem::last_write_time(include / "crt" / "host_defines.h");
  std::filesystem::last_write_time(include / "crt" / "host_defines.h", when - std::chrono::hours(1));
  std::string touched = cuda_headers_digest(dirs);
  EXPECT_NE(touched, edited);
  EXPECT_EQ(touched, digest_by_std_filesystem(dirs));

  // A nested folder that is a link to one elsewhere: the outer walk did not enter it, so it is
  // walked on its own.
  std::filesystem::path linked = include / "linked_folder";
  EXPECT_EQ(cuda_headers_digest({include, linked}), digest_by_std_filesystem({include, linked}));
  EXPECT_NE(cuda_headers_digest({include, linked}), cuda_headers_digest({include}));
}

// The toolkit's own folders, as detect_toolchain names them (include/cccl lies in include).
TEST(CudaHeadersDigest, OfTheToolkitsHeadersIsWhatStdFilesystemGives) {
  std::filesystem::path include = std::filesystem::path(KCACHE_CUDA_ROOT) / "include";
  if (!std::filesystem::is_directory(include / "cccl")) GTEST_SKIP() << "no CUDA toolkit headers at " << include;
  const std::vector<std::filesystem::path> dirs = {include, include / "cccl"};
  EXPECT_EQ(cuda_headers_digest(dirs), digest_by_std_filesystem(dirs));
}

// The launcher names a device step's tool from nvcc's plan (its CICC_PATH, PATH and
// NVVMIR_LIBRARY_DIR); the daemon from its own toolkit. Both through device_tool_identity, and
// here pinned equal on a recorded plan of this toolkit: were they to differ, every step would
// be refused by the daemon and run on the client.
TEST(ToolRuns, TheLaunchersToolIdentityIsTheDaemons) {
  if (test::ptxas_path().empty()) GTEST_SKIP() << "no CUDA toolkit: /usr/local/cuda/bin/ptxas is absent";
  std::map<std::string, std::string> vars;
  auto steps = launcher::parse_plan(test::read_test_data("launcher/plans/plain-sm80.nvcc"), vars);
  ASSERT_TRUE(steps) << steps.error().message;
  Toolchain toolkit = detect_toolchain("/usr/local/cuda", CubinAssembler::ptxas, ToolkitLibraries::load, {}, nullptr);
  auto digest_of = [](const std::string& p) -> Expected<Digest> {
    auto d = sha256_file(p);
    if (!d) return make_error(ErrorCode::k_not_found, "cannot read " + p);
    return *d;
  };
  const std::string libdevice = vars["NVVMIR_LIBRARY_DIR"] + "/libdevice.10.bc";
  for (StepTool tool : {StepTool::cicc, StepTool::ptxas}) {
    std::string program = tool == StepTool::cicc ? vars["CICC_PATH"] + "/cicc" : search_path("ptxas", vars["PATH"]);
    auto launchers = device_tool_identity(tool, program, libdevice, digest_of);
    auto daemons = own_step_tool_identity(toolkit, tool);
    ASSERT_TRUE(launchers && daemons) << step_tool_name(tool);
    EXPECT_EQ(*launchers, *daemons) << step_tool_name(tool);
  }
}

}  // namespace
}  // namespace kcache::server
