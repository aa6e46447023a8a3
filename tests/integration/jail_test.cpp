// The jail kcached runs tools on peers' bytes in (server/compile/jail.hpp), and the attacks on
// build steps that it and the checks at the edge (kcache/step.hpp) stop, each through a real
// kcached with real clang and cicc:
//   - response files (@FILE) in option values: the tokens file read, a file written, a plugin
//     loaded;
//   - the six spellings by which preprocessed input still read a file;
//   - an escape suite run in the jail itself while the daemon serves: the tokens file, the store,
//     /proc, /etc/shadow, writes outside its folder, the daemon's port, a fork bomb, a sleep past
//     the deadline, endless output, memory and file size;
//   - a daemon without a jail, which refuses build steps unless told to accept the risk.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "compile/jail.hpp"
#include "daemon_fixture.hpp"
#include "kcache/process.hpp"
#include "kcache/step.hpp"
#include "test_support.hpp"

namespace kcache::test {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using server::Jail;
using server::JailPolicy;

const fs::path k_cuda = KCACHE_CUDA_ROOT;
const fs::path k_clang = "/usr/lib/llvm-22/bin/clang";
const fs::path k_libdevice = k_cuda / "nvvm" / "libdevice" / "libdevice.10.bc";
const fs::path k_cicc = k_cuda / "nvvm" / "bin" / "cicc";

// The identity the launcher computes for the daemon's tool (StepSpec::tool_digest), as hex.
std::string identity_hex(StepTool tool) {
  std::vector<std::string> files;
  if (tool == StepTool::clang) files = clang_identity_files(k_clang.string());
  if (tool == StepTool::cicc) files = {k_cicc.string()};
  files.push_back(k_libdevice.string());
  std::vector<Digest> digests;
  for (const std::string& f : files) digests.push_back(sha256_file(f).value_or(Digest{}));
  return to_hex(step_tool_identity(tool, digests));
}

// A clang device compile of one tiny kernel, as the launcher sends it.
v1::StepRequest clang_request() {
  v1::StepRequest r;
  r.set_tool(v1::STEP_TOOL_CLANG);
  r.set_tool_digest(identity_hex(StepTool::clang));
  for (const char* a : {"-cc1", "-triple", "nvptx64-nvidia-cuda", "-fcuda-is-device", "-S", "-target-cpu", "sm_80",
                        "-main-file-name", "k.cu", "-ferror-limit", "19", "-mlink-builtin-bitcode", "libdevice.10.bc",
                        "-o", "f1.s", "-x", "cuda-cpp-output", "f0.cui"}) {
    r.add_args(a);
  }
  v1::StepFile* in = r.add_inputs();
  in->set_name("f0.cui");
  in->set_content("# 1 \"k.cu\"\nextern \"C\" __attribute__((global)) void k(float* x) { x[0] = 1; }\n");
  r.add_outputs("f1.s");
  return r;
}

// Processes of jails' users (k_jail_uid_base and above) on this machine.
int processes_of_jail_user() {
  int count = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(entry.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.starts_with("Uid:")) {
        std::istringstream fields(line.substr(4));
        unsigned long long uid = 0;
        fields >> uid;
        count += uid >= server::k_jail_uid_base;
        break;
      }
    }
  }
  return count;
}

class JailedSteps : public DaemonTest {
 protected:
  static constexpr const char* k_admin = "admin-token-that-must-never-leave-0123456789";
  static constexpr const char* k_compile = "compile-token-0123456789abcdef";

  void SetUp() override {
    write_file(m_dir.path() / "tokens", std::string("ops admin ") + k_admin + "\nbuilder compile " + k_compile + "\n");
    write_file(m_dir.path() / "secret", "THE-SECRET-BYTES\n");
    DaemonTest::SetUp();
  }
  std::vector<std::string> daemon_args() const override {
    return {"--tokens-file", (m_dir.path() / "tokens").string()};
  }
  Client builder() const {
    ClientOptions o{m_daemon->address(), std::chrono::seconds(60)};
    o.token = k_compile;
    return Client(o);
  }

  static void skip_without(const fs::path& tool) {
    if (!fs::exists(tool)) GTEST_SKIP() << tool << " is absent";
    if (!fs::exists(k_libdevice)) GTEST_SKIP() << k_libdevice << " is absent (no CUDA toolkit)";
  }

  // A cicc compile of one tiny kernel, as the launcher sends it for nvcc -arch=sm_80.
  static v1::StepRequest cicc_request() {
    v1::StepRequest r;
    r.set_tool(v1::STEP_TOOL_CICC);
    r.set_tool_digest(identity_hex(StepTool::cicc));
    for (const char* a : {"--c++17", "--orig_src_file_name", "k.cu", "-arch", "compute_80", "-m64", "f0.ii", "-o",
                          "f1.ptx"}) {
      r.add_args(a);
    }
    v1::StepFile* in = r.add_inputs();
    in->set_name("f0.ii");
    in->set_content("# 1 \"k.cu\"\nextern \"C\" __attribute__((global)) void k(float* x) { x[0] = 1; }\n");
    r.add_outputs("f1.ptx");
    return r;
  }

  static int arg_index(const v1::StepRequest& r, const std::string& option) {
    for (int i = 0; i < r.args_size(); ++i) {
      if (r.args(i) == option) return i + 1;
    }
    ADD_FAILURE() << option << " is not among the arguments";
    return 0;
  }

  // Sends `request` as the compile-role peer; expects INVALID_ARGUMENT saying `why`, and that
  // nothing of the secrets came back.
  void expect_refused(const v1::StepRequest& request, const std::string& why, const std::string& what) {
    auto r = builder().step(request);
    ASSERT_FALSE(r) << what << ": ran, exit " << r->exit_code() << ", stderr: " << r->stderr_text();
    EXPECT_EQ(r.error().code, ErrorCode::k_invalid_argument) << what << ": " << r.error().message;
    EXPECT_NE(r.error().message.find(why), std::string::npos) << what << ": " << r.error().message;
    EXPECT_EQ(r.error().message.find(k_admin), std::string::npos) << what;
    EXPECT_EQ(r.error().message.find("THE-SECRET"), std::string::npos) << what;
  }
};

// clang expands @FILE in every argument before it reads any: a peer's option value that names a
// response file read the tokens file into diagnostics, wrote a file anywhere, and loaded a plugin
// that was one of the step's inputs. Each is refused at the edge, naming the argument.
TEST_F(JailedSteps, ResponseFilesInOptionValuesAreRefused) {
  skip_without(k_clang);
  auto ran = builder().step(clang_request());  // the step itself runs: the identity is clang's
  ASSERT_TRUE(ran) << ran.error().message;
  ASSERT_EQ(ran->exit_code(), 0) << ran->stderr_text();
  ASSERT_EQ(ran->outputs_size(), 1);
  EXPECT_NE(ran->outputs(0).content().find(".entry k"), std::string::npos) << ran->outputs(0).content();

  v1::StepRequest read = clang_request();
  read.set_args(arg_index(read, "-target-cpu"), "@" + (m_dir.path() / "tokens").string());
  expect_refused(read, "starts with '@'", "the tokens file as -target-cpu's response file");

  v1::StepRequest plugin = clang_request();
  plugin.set_args(arg_index(plugin, "-main-file-name"), "@rsp");
  v1::StepFile* rsp = plugin.add_inputs();
  rsp->set_name("rsp");
  rsp->set_content("x.cu -load ./p.so");
  v1::StepFile* so = plugin.add_inputs();
  so->set_name("p.so");
  so->set_content(read_file("/proc/self/exe").substr(0, 4096));
  expect_refused(plugin, "starts with '@'", "a plugin loaded through -main-file-name's response file");

  const fs::path planted = m_dir.path() / "planted.s";
  v1::StepRequest write = clang_request();
  write.set_args(arg_index(write, "-ferror-limit"), "@rsp");
  v1::StepFile* out_rsp = write.add_inputs();
  out_rsp->set_name("rsp");
  out_rsp->set_content("19 -o " + planted.string());
  expect_refused(write, "starts with '@'", "-o outside the folder through -ferror-limit's response file");
  EXPECT_FALSE(fs::exists(planted));

  // Each value is checked as what it is: a second -triple, a CPU that is no SM arch, a limit
  // that is no number.
  v1::StepRequest triple = clang_request();
  triple.add_args("-triple");
  triple.add_args("nvptx64-nvidia-cuda");
  expect_refused(triple, "given twice", "a second -triple");
  v1::StepRequest cpu = clang_request();
  cpu.set_args(arg_index(cpu, "-target-cpu"), "x86-64");
  expect_refused(cpu, "is not an SM arch", "-target-cpu x86-64");
  v1::StepRequest limit = clang_request();
  limit.set_args(arg_index(limit, "-ferror-limit"), "19 -o /tmp/x");
  expect_refused(limit, "is not a number", "-ferror-limit with words after it");
  v1::StepRequest cicc = cicc_request();
  cicc.set_args(arg_index(cicc, "--orig_src_file_name"), "@" + (m_dir.path() / "tokens").string());
  expect_refused(cicc, "starts with '@'", "a response file as cicc's source name");
}

// A peer's device link (nvlink) links only from the daemon's own toolkit: a -L folder of anything
// else is refused before nvlink runs, a library named by more than a plain name and a response
// file are refused at the edge, and a peer's junk "object" fails in the jail, nothing kept, the
// daemon serving on.
TEST_F(JailedSteps, ANvlinkStepLinksOnlyFromTheDaemonsToolkit) {
  const fs::path nvlink = k_cuda / "bin" / "nvlink";
  fs::path cudadevrt;
  for (const char* folder : {"lib64", "targets/x86_64-linux/lib"}) {
    if (cudadevrt.empty() && fs::exists(k_cuda / folder / "libcudadevrt.a")) cudadevrt = k_cuda / folder / "libcudadevrt.a";
  }
  if (!fs::exists(nvlink) || cudadevrt.empty()) GTEST_SKIP() << "no nvlink and libcudadevrt.a under " << k_cuda;
  auto request = [&](const std::string& folder) {
    v1::StepRequest r;
    r.set_tool(v1::STEP_TOOL_NVLINK);
    std::vector<Digest> files = {sha256_file(nvlink.string()).value_or(Digest{}), sha256_file(cudadevrt.string()).value_or(Digest{})};
    r.set_tool_digest(to_hex(step_tool_identity(StepTool::nvlink, files)));
    for (const std::string& a : std::vector<std::string>{"-m64", "--arch=sm_80", "-L" + folder, "-lcudadevrt", "-cpu-arch=X86_64",
                                                            "f0.o", "-o", "f1.cubin"}) {
      r.add_args(a);
    }
    v1::StepFile* in = r.add_inputs();
    in->set_name("f0.o");
    in->set_content("not an object THE-SECRET");
    r.add_outputs("f1.cubin");
    return r;
  };
  // A folder of the peer's choosing, and one that resolves to the toolkit's only through a link
  // outside it (which the jail would not have): refused before nvlink runs.
  fs::create_directory_symlink(cudadevrt.parent_path(), m_dir.path() / "toolkit-lib");
  for (const std::string& folder : {std::string("/etc"), (m_dir.path() / "toolkit-lib").string()}) {
    auto elsewhere = builder().step(request(folder));
    ASSERT_FALSE(elsewhere) << "nvlink ran with the -L folder " << folder;
    EXPECT_EQ(elsewhere.error().code, ErrorCode::k_failed_precondition) << elsewhere.error().message;
    EXPECT_NE(elsewhere.error().message.find("is not this kcached's toolkit's"), std::string::npos) << elsewhere.error().message;
  }

  v1::StepRequest traversal = request(cudadevrt.parent_path().string());
  traversal.set_args(3, "-l../../../etc/shadow");
  expect_refused(traversal, "more than a plain name", "a library named by a path");
  v1::StepRequest response = request(cudadevrt.parent_path().string());
  response.set_args(1, "@" + (m_dir.path() / "tokens").string());
  expect_refused(response, "starts with '@'", "a response file among nvlink's options");

  auto junk = builder().step(request(cudadevrt.parent_path().string()));
  ASSERT_TRUE(junk) << junk.error().message;
  EXPECT_NE(junk->exit_code(), 0) << "nvlink linked a junk object";
  EXPECT_EQ(junk->outputs_size(), 0);
  // The toolkit's folder as it resolves (/usr/local/cuda -> /usr/local/cuda-13.0, the spelling
  // CMake's device links use) is the toolkit's too: nvlink runs on it.
  auto resolved = builder().step(request(fs::canonical(cudadevrt.parent_path()).string()));
  ASSERT_TRUE(resolved) << "the toolkit's own folder, resolved: " << resolved.error().message;
  EXPECT_NE(resolved->exit_code(), 0) << "nvlink linked a junk object";
  auto again = builder().step(request(cudadevrt.parent_path().string()));
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_NE(again->outcome(), v1::OUTCOME_HIT) << "a failed link is never kept";
  // A link that names no library reads no folder (clang's nvlink names clang's own lib folder,
  // which nvlink only writes into the image): its folder is taken; with a library, refused.
  v1::StepRequest no_library = request("/etc");
  ASSERT_EQ(no_library.args(3), "-lcudadevrt");
  no_library.mutable_args()->DeleteSubrange(3, 1);
  auto inert = builder().step(no_library);
  ASSERT_TRUE(inert) << "a folder nvlink reads nothing from: " << inert.error().message;
  EXPECT_NE(inert->exit_code(), 0) << "nvlink linked a junk object";
  EXPECT_TRUE(builder().step(cicc_request())) << "the daemon serves on";
}

// Preprocessed input that still makes clang or cicc read a file of the daemon's host, spelled as
// the compilers read it and the old line check did not: a lone CR, a NUL or a non-ASCII blank
// before '#', a backslash-CR splice, #embed after a lone CR. All refused, nothing read.
TEST_F(JailedSteps, TheSpellingsThatReadAFileAreRefused) {
  skip_without(k_clang);
  const std::string secret = (m_dir.path() / "secret").string();
  struct Case {
    const char* what;
    std::string text;
    std::string why;
  };
  const std::vector<Case> clang_cases = {
      {"a lone CR before #include", "int a;\r#include \"" + secret + "\"\n", "CR that does not end a line"},
      {"a NUL before #", std::string("int a;\n\0#include \"", 16) + secret + "\"\n", "NUL"},
      {"U+00A0 before #", "int a;\n\xc2\xa0#include \"" + secret + "\"\n", "non-ASCII byte comes before its '#'"},
      {"U+3000 before #", "int a;\n\xe3\x80\x80#include \"" + secret + "\"\n", "non-ASCII byte comes before its '#'"},
      {"a backslash-CR splice hiding a block comment", "int a; /\\\r* */\n#include \"" + secret + "\"\n",
       "CR that does not end a line"},
      {"#embed after a lone CR", "const char s[] = {\r#embed \"" + secret + "\"\n, 0};\n", "CR that does not end a line"},
  };
  for (const Case& c : clang_cases) {
    v1::StepRequest r = clang_request();
    r.mutable_inputs(0)->set_content("# 1 \"k.cu\"\n" + c.text);
    expect_refused(r, c.why, std::string("clang: ") + c.what);
  }
  if (!fs::exists(k_cicc)) GTEST_SKIP() << k_cicc << " is absent: the cicc spelling is not tried";
  v1::StepRequest r = cicc_request();
  r.mutable_inputs(0)->set_content(std::string("# 1 \"k.cu\"\n\0#include \"", 22) + secret + "\"\n");
  expect_refused(r, "NUL", "cicc: a NUL before #include");
}

// The host compile, run by the daemon (in its jail) from the client's -fdirectives-only text with
// its own compiler of the client's identity: the object links and runs, a second ask hits, and
// each bad ask is refused clearly or fails as the compiler says.
TEST_F(JailedSteps, TheDaemonCompilesAHostObjectFromTheClientsText) {
  const fs::path gxx = "/usr/bin/g++";
  if (!fs::exists(gxx)) GTEST_SKIP() << gxx << " is absent";
  auto identity = host_compiler_identity(gxx.string(), "cc1plus", [](const std::string& path) -> Expected<Digest> {
    if (auto d = sha256_file(path)) return *d;
    return make_error(ErrorCode::k_not_found, path);
  });
  ASSERT_TRUE(identity) << identity.error().message;
  write_file(m_dir.path() / "seven.cpp", "#define SEVEN 7 /* the answer */\nint seven() { return SEVEN; }\n");
  auto text = run_process({gxx.string(), "-E", "-fdirectives-only", (m_dir.path() / "seven.cpp").string()});
  ASSERT_TRUE(text && text->exit_code == 0);
  auto request = [&](const std::string& content) {
    v1::StepRequest r;
    r.set_tool(v1::STEP_TOOL_HOST);
    r.set_tool_digest(to_hex(*identity));
    for (const char* a : {"-O2", "-fPIC", "-fpreprocessed", "-fdirectives-only"}) r.add_args(a);
    v1::StepFile* in = r.add_inputs();
    in->set_name("seven.cpp");
    in->set_content(content);
    r.add_outputs("object");
    return r;
  };
  auto ran = builder().step(request(text->output));
  ASSERT_TRUE(ran) << ran.error().message;
  ASSERT_EQ(ran->exit_code(), 0) << ran->stderr_text();
  EXPECT_EQ(ran->outcome(), v1::OUTCOME_MISS);
  ASSERT_EQ(ran->outputs_size(), 1);
  write_file(m_dir.path() / "seven.o", ran->outputs(0).content());
  write_file(m_dir.path() / "main.cpp", "#include <cstdio>\nint seven();\nint main() { std::printf(\"%d\\n\", seven()); }\n");
  auto linked = run_process({gxx.string(), (m_dir.path() / "main.cpp").string(), (m_dir.path() / "seven.o").string(), "-o",
                             (m_dir.path() / "seven").string()});
  ASSERT_TRUE(linked && linked->exit_code == 0) << (linked ? linked->output : linked.error().message);
  auto seven = run_process({(m_dir.path() / "seven").string()});
  ASSERT_TRUE(seven);
  EXPECT_EQ(seven->output, "7\n");
  // Looked up by digest, as the launcher asks first: the daemon's object.
  v1::StepRequest look = request("");
  look.mutable_inputs(0)->set_sha256(to_hex(sha256(text->output)));
  auto hit = builder().step(look);
  ASSERT_TRUE(hit) << hit.error().message;
  EXPECT_EQ(hit->outcome(), v1::OUTCOME_HIT);
  ASSERT_EQ(hit->outputs_size(), 1);
  EXPECT_TRUE(hit->outputs(0).content() == ran->outputs(0).content());

  v1::StepRequest plugin = request(text->output);
  plugin.add_args("-fplugin=evil.so");
  expect_refused(plugin, "is not an option a daemon runs a host compile with", "a plugin");
  v1::StepRequest path = request(text->output);
  path.add_args("-fprofile-dir=/tmp");
  expect_refused(path, "names a path", "a path in a flag");
  const std::string secret = (m_dir.path() / "secret").string();
  expect_refused(request("int a;\n/* */ #include \"" + secret + "\"\n"), "#include directive", "an include after a comment");
  v1::StepRequest whole = request(text->output);
  whole.set_tool(v1::STEP_TOOL_NVCC);
  expect_refused(whole, "only a host step runs on the daemon", "nvcc's whole compile");
  v1::StepRequest stranger = request(text->output);
  stranger.set_tool_digest(std::string(64, 'a'));
  auto no_such = builder().step(stranger);
  ASSERT_FALSE(no_such);
  EXPECT_EQ(no_such.error().code, ErrorCode::k_failed_precondition);
  EXPECT_NE(no_such.error().message.find("no host compiler of identity"), std::string::npos) << no_such.error().message;
  // A compile that fails there says why, and nothing is kept.
  auto broken = builder().step(request("int broken = ;\n"));
  ASSERT_TRUE(broken) << broken.error().message;
  EXPECT_NE(broken->exit_code(), 0);
  EXPECT_NE(broken->stderr_text().find("error"), std::string::npos) << broken->stderr_text();
  v1::StepRequest broken_look = request("");
  broken_look.mutable_inputs(0)->set_sha256(to_hex(sha256("int broken = ;\n")));
  auto not_kept = builder().step(broken_look);
  ASSERT_TRUE(not_kept);
  EXPECT_EQ(not_kept->outputs_size(), 0);
}

// What a tool run on a peer's bytes can reach, tried from inside the jail while the daemon
// serves: each is refused or bounded, and the daemon goes on.
TEST_F(JailedSteps, NothingEscapesTheJail) {
  JailPolicy policy;
  policy.read_only = {k_cuda};
  policy.max_memory_bytes = 512ULL << 20;
  policy.max_file_bytes = 1ULL << 20;
  const int jailed_before = processes_of_jail_user();  // other jails' on this machine
  Jail jail = Jail::probe(policy);
  if (jail.mode() != Jail::Mode::bwrap) GTEST_SKIP() << "no jail on this machine: " << jail.reason();
  const std::string port = m_daemon->address().substr(m_daemon->address().rfind(':') + 1);
  auto run = [&](const std::string& script, std::chrono::milliseconds limit = 10s) {
    TempDir folder;
    ProcessOptions options;
    options.deadline = std::chrono::steady_clock::now() + limit;
    options.max_output = 1 << 20;
    options.kill_past_max_output = true;
    return jail.run({"/usr/bin/bash", "-c", script}, folder.path(), options);
  };
  struct Attempt {
    const char* what;
    std::string script;
    std::string never;  // what must not appear in its output
  };
  const std::vector<Attempt> refused = {
      {"read the tokens file", "cat " + (m_dir.path() / "tokens").string(), k_admin},
      {"list the store", "ls " + db().string(), "CURRENT"},
      {"read /etc/shadow", "cat /etc/shadow", "root:"},
      {"read the daemon's environment", "cat /proc/" + std::to_string(m_daemon->pid()) + "/environ", "PATH="},
      {"write to the toolkit", "echo x > " + (k_cuda / "kcache-escape").string(), ""},
      {"write to the system", "echo x > /usr/lib/kcache-escape", ""},
      {"write outside its folder", "echo x > " + (m_dir.path() / "escape").string(), ""},
      {"connect to the daemon's port", "exec 3<>/dev/tcp/127.0.0.1/" + port, ""},
      {"make a user namespace", "unshare --user --map-root-user true", ""},
      {"allocate past the memory limit", "head -c 600M /dev/zero | tail -c 1 >/dev/null; a=$(head -c 600M /dev/zero | tr '\\0' x)", ""},
      {"write past the file size limit", "head -c 2M /dev/zero > big", ""},
  };
  for (const Attempt& a : refused) {
    auto r = run(a.script);
    ASSERT_TRUE(r) << a.what << ": " << r.error().message;
    EXPECT_NE(r->exit_code, 0) << a.what << " succeeded: " << r->output;
    if (!a.never.empty()) {
      EXPECT_EQ(r->output.find(a.never), std::string::npos) << a.what << ": " << r->output;
    }
  }
  EXPECT_FALSE(fs::exists(m_dir.path() / "escape"));
  EXPECT_FALSE(fs::exists(k_cuda / "kcache-escape"));
  // A socket of another family fails in the seccomp filter itself, not only for want of a route.
  auto socket = run("exec 3<>/dev/tcp/127.0.0.1/" + port + " 2>&1");
  ASSERT_TRUE(socket);
  EXPECT_NE(socket->output.find("Address family not supported"), std::string::npos) << socket->output;
  // Only the jail's own processes are in its /proc.
  auto procs = run("ls /proc | grep -c '^[0-9]'");
  ASSERT_TRUE(procs);
  EXPECT_LE(std::stoi(procs->output), 6) << "processes seen from the jail";

  // Bounded: processes (as root, the jail's user has its own count), a fork bomb, a sleep past
  // the deadline, endless output.
  if (::geteuid() == 0) {
    auto limit = run("ulimit -u");
    ASSERT_TRUE(limit);
    EXPECT_EQ(limit->output, std::to_string(policy.max_processes) + "\n");
  }
  auto start = std::chrono::steady_clock::now();
  auto bomb = run("f() { f | f & }; f; sleep 60", 3s);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s) << "the fork bomb outlived its deadline";
  ASSERT_FALSE(bomb) << "the fork bomb ended by itself: " << bomb->output;
  EXPECT_EQ(bomb.error().code, ErrorCode::k_deadline_exceeded) << bomb.error().message;
  EXPECT_TRUE(eventually([&] { return processes_of_jail_user() <= jailed_before; }, 10s))
      << "the fork bomb's processes outlived the jail: " << processes_of_jail_user() << " of the jail's user";
  start = std::chrono::steady_clock::now();
  auto sleeper = run("sleep 60", 1s);
  ASSERT_FALSE(sleeper);
  EXPECT_EQ(sleeper.error().code, ErrorCode::k_deadline_exceeded);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  auto talker = run("yes kcache");
  ASSERT_FALSE(talker);
  EXPECT_EQ(talker.error().code, ErrorCode::k_resource_exhausted) << talker.error().message;

  // The daemon served throughout, and still runs steps.
  EXPECT_TRUE(builder().health());
  auto stats = builder().stats();
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->jail(), "bwrap");
  if (fs::exists(k_clang) && fs::exists(k_libdevice)) {
    auto ran = builder().step(clang_request());
    ASSERT_TRUE(ran) << ran.error().message;
    EXPECT_EQ(ran->exit_code(), 0) << ran->stderr_text();
  }
}

// Without a jail (--jail none stands for a machine without user namespaces), kcached says so and
// runs no build step, unless the operator accepts the risk with --allow-unjailed-steps.
class Unjailed : public DaemonTest {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--jail", "none"}; }
};

TEST_F(Unjailed, BuildStepsAreRefusedAndTheStatsSaySo) {
  auto stats = m_client->stats();
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->jail(), "none");
  EXPECT_NE(stats->jail_reason().find("--jail none"), std::string::npos) << stats->jail_reason();
  EXPECT_FALSE(stats->steps_unjailed());
  v1::StepRequest r;
  r.set_tool(v1::STEP_TOOL_PTXAS);
  r.set_tool_digest(std::string(64, 'a'));
  for (const char* a : {"-arch=sm_80", "f0.ptx", "-o", "f1.cubin"}) r.add_args(a);
  v1::StepFile* in = r.add_inputs();
  in->set_name("f0.ptx");
  in->set_content(".version 8.0\n.target sm_80\n.address_size 64\n");
  r.add_outputs("f1.cubin");
  auto refused = m_client->step(r);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::k_failed_precondition);
  EXPECT_NE(refused.error().message.find("--allow-unjailed-steps"), std::string::npos) << refused.error().message;
  CommandResult cli = run_cli({"stats"}, m_daemon->address());
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  EXPECT_NE(cli.out.find("none (started with --jail none): build steps refused"), std::string::npos) << cli.out;
}

class UnjailedAllowed : public DaemonTest {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--jail", "none", "--allow-unjailed-steps"}; }
};

TEST_F(UnjailedAllowed, BuildStepsRunAndTheStatsSaySo) {
  auto stats = m_client->stats();
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->jail(), "none");
  EXPECT_TRUE(stats->steps_unjailed());
  if (!fs::exists(k_clang) || !fs::exists(k_libdevice)) GTEST_SKIP() << "no clang or libdevice to run a step with";
  auto ran = m_client->step(clang_request());
  ASSERT_TRUE(ran) << ran.error().message;
  EXPECT_EQ(ran->exit_code(), 0) << ran->stderr_text();
}

}  // namespace
}  // namespace kcache::test
