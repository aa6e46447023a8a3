// Real nvcc command lines through the launcher, against plain nvcc: the shapes CMake (the CUDA
// language, 3.18 on), Make, Bazel's rules_cuda, PyTorch's C++ extensions, CUTLASS and meson emit
// (the same shapes as the recorded plans of tests/data/launcher/plans, here run for real). For
// each, in one folder: plain nvcc, then the launcher twice (a miss, then a hit). Each gives
// nvcc's objects (byte for byte once nvcc's temporary names are written as the launcher writes
// them: the fatbin's cubins and PTX and every symbol), nvcc's dependency file, nvcc's warnings
// and exit code; or the launcher runs nvcc unchanged and counts its reason.
#include <gtest/gtest.h>

#include <httplib.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "kcache/process.hpp"
#include "launcher_machine.hpp"
#include "kcache/search_path.hpp"
#include "kcache/sha256.hpp"
#include "test_paths.hpp"
#include "test_support.hpp"


namespace kcache::test {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// nvcc's temporary names (tmpxft_<pid>_<counter>) as the launcher writes them, and the time
// ptxas -v reports: the only bytes two runs of nvcc itself do not share.
std::string comparable(std::string bytes) {
  static const std::regex temporary("tmpxft_[0-9a-f]{8}_[0-9a-f]{8}");
  static const std::regex time("Compile time = [0-9.]+ ms");
  bytes = std::regex_replace(bytes, temporary, "tmpxft_00000000_00000000");
  return std::regex_replace(bytes, time, "Compile time = T ms");
}

// One command line of the corpus: nvcc's arguments, the files it writes (compared), and what the
// launcher must do: "cached" (its steps run, a hit the second time) or the reason it runs nvcc
// unchanged, as counted.
struct Line {
  std::string shape;
  std::vector<std::string> args;
  std::vector<std::string> outputs;
  std::string outcome = "cached";
  int compiles = 1;  // the sources it compiles, each its own
  // Objects compared whole; else by their device code (the .nv_fatbin section: every cubin and
  // PTX) and symbols, where nvcc's own temporary names differ in more than their process ID
  // (several sources in one nvcc: the second's are numbered after the first's).
  bool whole_objects = true;
};

class LauncherCorpus : public ::testing::Test {
 protected:
  void SetUp() override {
    nvcc_ = fs::path(KCACHE_CUDA_ROOT) / "bin" / "nvcc";
    if (!fs::exists(nvcc_)) GTEST_SKIP() << "no CUDA toolkit at " << KCACHE_CUDA_ROOT << " (nvcc): nothing to launch";
    work_ = m_dir.path() / "src";
    fs::create_directories(work_ / "inc");
    fs::create_directories(work_ / "my dir");
    fs::create_directories(work_ / "obj");
    const std::string kernel =
        "#include \"shared.cuh\"\n"
        "__global__ void scale(float* x, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] = twice(x[i]); }\n"
        "void run_scale(float* x, int n) { scale<<<(n + 255) / 256, 256>>>(x, n); }\n";
    std::ofstream(work_ / "inc" / "shared.cuh") << "#pragma once\n__device__ inline float twice(float v) { return 2 * v; }\n";
    std::ofstream(work_ / "k.cu") << kernel;
    std::ofstream(work_ / "k.cpp") << kernel;
    std::ofstream(work_ / "my dir" / "k s.cu") << kernel;
    for (const char* name : {"a", "b", "c"}) {
      std::ofstream(work_ / (std::string(name) + ".cu"))
          << "#include <cstdio>\n__global__ void kernel_" << name << "(int* x) { x[0] = '" << name << "'; }\n"
          << "void host_" << name << "() { std::printf(\"" << name << "\\n\"); }\n";
    }
    std::ofstream(work_ / "lambda.cu") << "#include \"shared.cuh\"\ntemplate <class F> __global__ void apply(float* x, F f) { x[0] = f(x[0]); }\n"
                                          "constexpr float k_scale() { return 3; }\n"
                                          "void run(float* x) { apply<<<1, 1>>>(x, [] __device__(float v) { return v * k_scale(); }); }\n";
    std::ofstream(work_ / "warn.cu") << "#warning \"from the source\"\n__global__ void w(int* x) { int unused = 3; x[0] = 1; }\n";
    std::ofstream(work_ / "broken.cu") << "#ifdef __CUDA_ARCH__\n__device__ int f() { return undefined_name; }\n#endif\n"
                                          "__global__ void k(int* x) { x[0] = 1; }\n";
    std::ofstream(work_ / "defines.cu") << "#include <cstdio>\n#define STR2(x) #x\n#define STR(x) STR2(x)\n"
                                           "__global__ void d(int* x) { x[0] = sizeof(STR(NAME)); }\n"
                                           "const char* name() { return STR(NAME) Q; }\n";
    std::ofstream(work_ / "opts.txt") << "-O3\n-DFROM_OPTIONS_FILE=1 -arch=sm_80\n";
    daemon_ = DaemonProcess::start(m_dir.path() / "db", m_dir.path() / "kcached.log", {});
  }
  void TearDown() override {
    if (!HasFailure()) return;
    m_dir.keep();
    std::fprintf(stderr, "kept %s (daemon log, sources)\n", m_dir.path().c_str());
  }

  ProcessResult run(const std::vector<std::string>& argv) {
    return run_on_machine(argv, work_, daemon_->address(), m_dir.path() / "state");
  }
  std::map<std::string, long> counts() { return counts_.delta(); }

  // An object's device code (its .nv_fatbin or __nv_relfatbin section, whose digest stands for it) and its symbols
  // names and kinds, one per line.
  std::string device_code_and_symbols(const fs::path& object) {
    fs::path section = m_dir.path() / "section.bin";
    fs::remove(section);
    // .nv_fatbin; __nv_relfatbin for relocatable device code (-dc).
    ProcessResult copied = run({"/usr/bin/objcopy", "-O", "binary", "--only-section=.nv_fatbin",
                                "--only-section=__nv_relfatbin", object.string(), section.string()});
    EXPECT_EQ(copied.exit_code, 0) << copied.error_output;
    std::string fatbin = read_all(section);
    EXPECT_FALSE(fatbin.empty()) << object << " has no device code";
    std::string out = "fatbin " + to_hex(sha256(fatbin)) + "\n";
    ProcessResult nm = run({"/usr/bin/nm", object.string()});
    std::istringstream in(nm.output);
    for (std::string l; std::getline(in, l);) out += l.size() > 17 ? l.substr(17) + "\n" : l + "\n";
    return out;
  }

  // Plain nvcc, then the launcher (a miss, then a hit): the same outputs, messages and exit code.
  void check(const Line& line) {
    SCOPED_TRACE(line.shape);
    std::vector<std::string> plain = {compiler_.empty() ? nvcc_.string() : compiler_};
    plain.insert(plain.end(), line.args.begin(), line.args.end());
    std::vector<std::string> launched = {KCACHE_CLI_PATH};
    launched.insert(launched.end(), plain.begin(), plain.end());
    auto clear = [&] {
      for (const std::string& out : line.outputs) fs::remove(work_ / out);
    };
    clear();
    ProcessResult theirs = run(plain);
    std::map<std::string, std::string> expected, expected_device;
    for (const std::string& out : line.outputs) {
      expected[out] = comparable(read_all(work_ / out));
      if (!line.whole_objects) expected_device[out] = device_code_and_symbols(work_ / out);
      if (theirs.exit_code == 0) {
        EXPECT_FALSE(expected[out].empty()) << "nvcc wrote no " << out;
      }
    }
    counts();
    for (const char* pass : {"miss", "hit"}) {
      SCOPED_TRACE(pass);
      clear();
      ProcessResult ours = run(launched);
      EXPECT_EQ(ours.exit_code, theirs.exit_code) << ours.error_output;
      EXPECT_EQ(comparable(ours.output), comparable(theirs.output));
      // A miss prints in nvcc's order; a hit prints this run's preprocessors' messages first.
      auto lines = [](const std::string& text) {
        std::vector<std::string> out;
        std::istringstream in(comparable(text));
        for (std::string l; std::getline(in, l);) out.push_back(l);
        std::sort(out.begin(), out.end());
        return out;
      };
      if (std::string(pass) == "miss") EXPECT_EQ(comparable(ours.error_output), comparable(theirs.error_output));
      else EXPECT_EQ(lines(ours.error_output), lines(theirs.error_output));
      for (const std::string& out : line.outputs) {
        if (line.whole_objects) {
          EXPECT_TRUE(comparable(read_all(work_ / out)) == expected[out]) << out << " differs from nvcc's";
        } else {
          EXPECT_EQ(device_code_and_symbols(work_ / out), expected_device[out]) << out;
        }
      }
      auto c = counts();
      if (line.outcome == "cached" && theirs.exit_code == 0) {
        EXPECT_EQ(c["launcher.compiles"], line.compiles) << "the launcher ran the compiler's plan, once per source";
        if (std::string(pass) == "hit") {
          EXPECT_GE(c["nvcc.hit"] + c["nvcc.local_hit"] + c["host.hit"] + c["host.local_hit"] + c["cicc.hit"] + c["clang.hit"], 1)
              << "a hit the second time";
        }
      } else if (line.outcome != "cached") {
        std::string reason = "uncacheable." + line.outcome;
        std::replace(reason.begin(), reason.end(), ' ', '_');
        EXPECT_EQ(c[reason], 1) << "counted as " << reason;
        EXPECT_EQ(c["launcher.compiles"], 0);
      }
    }
  }

  TempDir m_dir;
  fs::path nvcc_, work_;
  std::string compiler_;  // the compiler of check(): nvcc when empty
  std::unique_ptr<DaemonProcess> daemon_;
  LauncherCounts counts_{m_dir.path() / "state"};
};

TEST_F(LauncherCorpus, RealCommandLinesGiveWhatNvccGives) {
  const std::string inc = "-Iinc";
  std::vector<Line> corpus = {
      {"make: plain", {inc, "-arch=sm_80", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"-o before -c", {inc, "-arch=sm_80", "-o", "k.o", "-c", "k.cu"}, {"k.o"}},
      {"-ccbin", {"-ccbin", "/usr/bin/g++", inc, "-arch=sm_80", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"--generate-code with a list", {inc, "--generate-code=arch=compute_80,code=[compute_80,sm_80]", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"-gencode pairs", {inc, "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"-x cu on a .cpp", {inc, "-arch=sm_80", "-x", "cu", "-c", "k.cpp", "-o", "k.o"}, {"k.o"}},
      {"-rdc=true -dc", {inc, "-arch=sm_80", "-rdc=true", "-dc", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"-Xcompiler=-fPIC,-O2", {inc, "-arch=sm_80", "-Xcompiler=-fPIC,-O2", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"--compiler-options '-fPIC -Wall'", {inc, "-arch=sm_80", "--compiler-options", "-fPIC -Wall", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"-Xptxas -v", {inc, "-arch=sm_80", "-Xptxas", "-v", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"--threads 0 (redirections in its plan)", {inc, "--threads", "0", "-gencode", "arch=compute_80,code=sm_80", "-gencode", "arch=compute_90,code=sm_90", "-c", "k.cu", "-o", "k.o"}, {"k.o"}, "plan syntax"},
      {"-forward-unknown-to-host-compiler", {inc, "-arch=sm_80", "-forward-unknown-to-host-compiler", "-Wall", "-Wextra", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"--options-file", {inc, "--options-file", "opts.txt", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"-maxrregcount --use_fast_math", {inc, "-arch=sm_80", "-maxrregcount=32", "--use_fast_math", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"-lineinfo", {inc, "-arch=sm_80", "-lineinfo", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"-G", {inc, "-arch=sm_80", "-G", "-c", "k.cu", "-o", "k.o"}, {}, "option -G"},
      {"-MD -MT -MF", {inc, "-arch=sm_80", "-MD", "-MT", "obj/k.cu.o", "-MF", "obj/k.cu.o.d", "-c", "k.cu", "-o", "obj/k.cu.o"}, {"obj/k.cu.o", "obj/k.cu.o.d"}},
      {"-isystem", {"-isystem", "inc", "-arch=sm_80", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"lambdas: --expt-relaxed-constexpr --extended-lambda -std=c++17", {inc, "-arch=sm_80", "--expt-relaxed-constexpr", "--extended-lambda", "-std=c++17", "-c", "lambda.cu", "-o", "l.o"}, {"l.o"}},
      {"-D values with spaces and quotes", {"-arch=sm_80", "-DNAME=a b", "-DQ=\"x\"", "-c", "defines.cu", "-o", "d.o"}, {"d.o"}},
      {"a path with spaces", {inc, "-arch=sm_80", "-c", "my dir/k s.cu", "-o", "my dir/k s.o"}, {"my dir/k s.o"}},
      {"two sources", {"-arch=sm_80", "-c", "a.cu", "b.cu"}, {"a.o", "b.o"}, "cached", 2, false},
      {"three sources -dc", {"-arch=sm_80", "-dc", "a.cu", "b.cu", "c.cu"}, {"a.o", "b.o", "c.o"}, "cached", 3, false},
      {"two sources and -o", {"-arch=sm_80", "-c", "a.cu", "b.cu", "-o", "x.o"}, {}, "several sources with -o"},
      {"cmake 3.18+", {"-forward-unknown-to-host-compiler", "-DKERNELS_EXPORTS", inc, "-O3", "-DNDEBUG",
                       "--generate-code=arch=compute_80,code=[compute_80,sm_80]", "-Xcompiler=-fPIC", "-MD", "-MT",
                       "obj/k.cu.o", "-MF", "obj/k.cu.o.d", "-x", "cu", "-c", "k.cu", "-o", "obj/k.cu.o"},
       {"obj/k.cu.o", "obj/k.cu.o.d"}},
      {"pytorch extension", {inc, "-D__CUDA_NO_HALF_OPERATORS__", "-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
                             "-D__CUDA_NO_HALF2_OPERATORS__", "--expt-relaxed-constexpr", "--compiler-options", "-fPIC", "-O2",
                             "-gencode=arch=compute_80,code=sm_80", "-std=c++17", "-c", "k.cu", "-o", "k.o"},
       {"k.o"}},
      {"cutlass", {inc, "-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1", "--expt-relaxed-constexpr", "-Xcompiler=-Wconversion",
                   "-Xcompiler=-fno-strict-aliasing", "-gencode", "arch=compute_90a,code=sm_90a", "-c", "k.cu", "-o", "k.o"},
       {"k.o"}},
      {"meson (with -g)", {inc, "-Xcompiler=-Wall,-Winvalid-pch", "-O2", "-g", "-arch=sm_80", "-MD", "-MT", "obj/k.cu.o", "-MF",
                           "obj/k.cu.o.d", "-o", "obj/k.cu.o", "-c", "k.cu"},
       {"obj/k.cu.o.d"}},
      {"bazel rules_cuda", {"-x", "cu", "-ccbin", "/usr/bin/gcc", inc, "--generate-code=arch=compute_80,code=sm_80",
                            "--generate-code=arch=compute_90,code=sm_90", "-c", "k.cu", "-o", "k.o"},
       {"k.o"}},
      {"warnings from each step", {"-arch=sm_80", "-c", "warn.cu", "-o", "w.o"}, {"w.o"}},
      {"nvcc's own warning", {"-ccbin", "g++", "-ccbin", "gcc", "-arch=sm_80", "-c", "a.cu", "b.cu"}, {"a.o", "b.o"}, "cached", 2, false},
      {"a failing compile", {"-arch=sm_80", "-c", "broken.cu", "-o", "b.o"}, {"b.o"}},
      {"-E", {inc, "-arch=sm_80", "-E", "k.cu", "-o", "k.ii"}, {"k.ii"}, "option -E"},
      {"a link", {"a.o", "b.o", "-o", "app"}, {}, "not a compile (linking)"},
  };
  for (const Line& line : corpus) check(line);
}

// clang++-22 as the CUDA compiler, on the shapes of the recorded clang plans: a miss and a hit
// give clang's own objects (this kernel has no static device variable, so the unit's name,
// -cuid=, which the launcher sets, names nothing in them) and dependency files, or clang runs
// unchanged with its reason counted.
TEST_F(LauncherCorpus, ClangCommandLinesGiveWhatClangGives) {
  const std::string clang = "/usr/bin/clang++-22";
  if (!fs::exists(clang)) GTEST_SKIP() << clang << " is absent (clang-22)";
  const std::string cuda = std::string("--cuda-path=") + KCACHE_CUDA_ROOT;
  std::vector<Line> corpus = {
      {"plain", {"-x", "cuda", cuda, "--cuda-gpu-arch=sm_80", "-Iinc", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"two archs", {"-x", "cuda", cuda, "--cuda-gpu-arch=sm_80", "--cuda-gpu-arch=sm_90", "-Iinc", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {".cu without -x, --offload-arch", {cuda, "--offload-arch=sm_80,sm_90", "-Iinc", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"-O2 -std=c++17 -fPIC", {"-x", "cuda", cuda, "--cuda-gpu-arch=sm_80", "-O2", "-std=c++17", "-fPIC", "-Iinc", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"-MD -MF", {"-x", "cuda", cuda, "--cuda-gpu-arch=sm_80", "-Iinc", "-MD", "-MT", "obj/k.o", "-MF", "obj/k.d", "-c", "k.cu", "-o", "obj/k.o"}, {"obj/k.o", "obj/k.d"}},
      {"-isystem and -D with spaces", {"-x", "cuda", cuda, "--cuda-gpu-arch=sm_80", "-isystem", "inc", "-DNAME=a b", "-DQ=\"x\"", "-c", "defines.cu", "-o", "d.o"}, {"d.o"}},
      {"-Xclang", {"-x", "cuda", cuda, "--cuda-gpu-arch=sm_80", "-Xclang", "-fno-pch-timestamp", "-Iinc", "-c", "k.cu", "-o", "k.o"}, {"k.o"}},
      {"a path with spaces", {"-x", "cuda", cuda, "--cuda-gpu-arch=sm_80", "-Iinc", "-c", "my dir/k s.cu", "-o", "my dir/k s.o"}, {"my dir/k s.o"}},
      {"two sources", {"-x", "cuda", cuda, "--cuda-gpu-arch=sm_80", "-c", "a.cu", "b.cu"}, {"a.o", "b.o"}, "cached", 2},
      {"-g", {"-x", "cuda", cuda, "--cuda-gpu-arch=sm_80", "-g", "-Iinc", "-c", "k.cu", "-o", "k.o"}, {}, "option -g (clang)"},
      {"--cuda-device-only", {"-x", "cuda", cuda, "--cuda-gpu-arch=sm_80", "--cuda-device-only", "-Iinc", "-c", "k.cu", "-o", "k.o"}, {}, "option --cuda-device-only (clang)"},
  };
  compiler_ = clang;
  for (const Line& line : corpus) check(line);
}

// cudafe++ names a -rdc unit whose templates use static device code before its first external
// definition (as cuda-samples' mergeSort.cu) by its time and process ID: two runs of nvcc give
// two objects. Through the launcher, the ID is the unit's: two cold compiles (a daemon each) give
// one object, and after a host-only edit every device step hits.
TEST_F(LauncherCorpus, AUnitsModuleIdIsItsOwn) {
  std::ofstream(work_ / "x.cu") << "template <int N> static __device__ int f(int x) { return x + N; }\n"
                                   "template <int N> __global__ void k(int* a) { a[0] = f<N>(N); }\n"
                                   "static void launch(int* a) { k<1><<<1, 1>>>(a); }\n"
                                   "extern \"C\" void go(int* a) { launch(a); }\n";
  const std::vector<std::string> args = {"-arch=sm_80", "-dc", "x.cu", "-o", "x.o"};
  std::vector<std::string> plain = {nvcc_.string()};
  plain.insert(plain.end(), args.begin(), args.end());
  ASSERT_EQ(run(plain).exit_code, 0);
  std::string first = comparable(read_all(work_ / "x.o"));
  ASSERT_EQ(run(plain).exit_code, 0);
  EXPECT_NE(comparable(read_all(work_ / "x.o")), first) << "nvcc's own runs agree: this unit no longer shows the bug";

  std::vector<std::string> launched = {KCACHE_CLI_PATH};
  launched.insert(launched.end(), plain.begin(), plain.end());
  counts();
  ASSERT_EQ(run(launched).exit_code, 0);
  EXPECT_EQ(counts()["launcher.module_id_made"], 1);
  std::string ours = read_all(work_ / "x.o");
  // Another daemon, with nothing stored: a cold compile again.
  daemon_ = DaemonProcess::start(m_dir.path() / "db2", m_dir.path() / "kcached2.log", {"--metrics-listen", "127.0.0.1:0"});
  fs::remove_all(m_dir.path() / "state" / "objects");
  ASSERT_EQ(run(launched).exit_code, 0);
  auto cold = counts();
  EXPECT_EQ(cold["cicc.miss"], 1) << "a cold compile";
  EXPECT_TRUE(read_all(work_ / "x.o") == ours) << "two cold compiles of the unit differ";

  std::ofstream(work_ / "x.cu", std::ios::app) << "#ifndef __CUDA_ARCH__\nint host_only_edit() { return 3; }\n#endif\n";
  ASSERT_EQ(run(launched).exit_code, 0);
  auto edited = counts();
  EXPECT_EQ(edited["host.miss"], 1);
  EXPECT_EQ(edited["cicc.hit"], 1) << "the host-only edit kept the module ID, and so the device steps";
  EXPECT_EQ(edited["ptxas.hit"], 1);

  // A build farm's hit rate counts its build steps: this daemon served no Compile at all.
  auto shown = run({KCACHE_CLI_PATH, "--server", daemon_->address(), "--json", "stats"});
  ASSERT_EQ(shown.exit_code, 0) << shown.error_output;
  auto stats = nlohmann::json::parse(shown.output);
  EXPECT_EQ(stats["compile_hits"], 0);
  EXPECT_GE(stats["hits"].get<long>(), 2) << "the cicc and ptxas hits";
  long step_hits = 0;
  for (const auto& [tool, counted] : stats["steps"].items()) step_hits += counted["hits"].get<long>();
  EXPECT_EQ(stats["hits"].get<long>(), step_hits);
  EXPECT_GT(stats["hit_ratio"].get<double>(), 0.0);
  auto text = run({KCACHE_CLI_PATH, "--server", daemon_->address(), "stats"});
  EXPECT_NE(text.output.find("requests: compiles and build steps"), std::string::npos) << text.output;
  // ... and Prometheus sees the same.
  std::smatch port;
  std::string log = read_all(m_dir.path() / "kcached2.log");
  ASSERT_TRUE(std::regex_search(log, port, std::regex("metrics: http://127\\.0\\.0\\.1:([0-9]+)/metrics"))) << log;
  httplib::Client http("127.0.0.1", std::stoi(port[1]));
  auto metrics = http.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("\nkcache_hits_total " + std::to_string(step_hits) + "\n"), std::string::npos) << metrics->body;
  EXPECT_NE(metrics->body.find("\nkcache_compile_hits_total 0\n"), std::string::npos);
  std::smatch ratio;
  ASSERT_TRUE(std::regex_search(metrics->body, ratio, std::regex("\nkcache_hit_ratio ([0-9.e-]+)\n")));
  EXPECT_GT(std::stod(ratio[1]), 0.0);
}

// Any compiler may stand after kcache: versioned names, full paths, and kcache linked under a
// compiler's name early on PATH; C and C++ run as they would, counted.
TEST_F(LauncherCorpus, AnyCompilerAfterKcacheRunsAsItWould) {
  std::ofstream(work_ / "x.c") << "int f(void) { return 1; }\n";
  std::ofstream(work_ / "y.cpp") << "int g() { return 2; }\n";
  counts();
  for (const char* compiler : {"gcc-12", "/usr/bin/g++-12", "cc", "c++"}) {
    if (std::string(compiler).find('/') != std::string::npos ? !fs::exists(compiler)
                                                             : search_path(compiler, k_default_path).empty()) {
      continue;
    }
    ProcessResult r = run({KCACHE_CLI_PATH, compiler, "-c", "x.c", "-o", "x.o"});
    EXPECT_EQ(r.exit_code, 0) << compiler << ": " << r.error_output;
    EXPECT_TRUE(fs::exists(work_ / "x.o")) << compiler;
    fs::remove(work_ / "x.o");
    EXPECT_EQ(counts()["uncacheable.compiler_" + fs::path(compiler).filename().string()], 1) << compiler;
  }
  // Masquerade: kcache as g++ on PATH runs the next g++.
  fs::path bin = m_dir.path() / "bin";
  fs::create_directories(bin);
  fs::create_symlink(KCACHE_CLI_PATH, bin / "g++");
  ProcessResult r = run({"/usr/bin/env", "PATH=" + bin.string() + ":/usr/bin:/bin", "g++", "-c", "y.cpp", "-o", "y.o"});
  EXPECT_EQ(r.exit_code, 0) << r.error_output;
  EXPECT_TRUE(fs::exists(work_ / "y.o"));
  EXPECT_EQ(counts()["uncacheable.compiler_g++"], 1);
}

// tests/data/launcher_multi: a static library of relocatable device code (separable
// compilation: each executable is device-linked), a C++ library, two executables, nine
// architectures, built by CMake and Ninja with kcache as the CUDA and C++ compilers' launcher, and
// plainly. Each executable's device code (its linked fatbin) and symbols equal the plain
// build's; after ninja clean the launcher's build hits every whole compile and gives the same
// executables.
TEST_F(LauncherCorpus, AMultiTargetCmakeProjectGivesAPlainBuildsDeviceCode) {
  for (const char* tool : {"/usr/bin/cmake", "/usr/bin/ninja"}) {
    if (!fs::exists(tool)) GTEST_SKIP() << tool << " is absent";
  }
  fs::path source = m_dir.path() / "multi";
  fs::copy(fs::path(KCACHE_TEST_DATA_DIR) / "launcher_multi", source, fs::copy_options::recursive);
  // CMake runs CMAKE_CUDA_COMPILER_LAUNCHER for compiles only; its device links (nvcc -dlink) go
  // through kcache as CMake's CUDA compiler itself: kcache linked as nvcc, which finds the
  // toolkit's nvcc on PATH or by CUDA_PATH (build-farms.md says so).
  const fs::path masquerade = m_dir.path() / "kcache-bin" / "nvcc";
  fs::create_directories(masquerade.parent_path());
  fs::create_symlink(KCACHE_CLI_PATH, masquerade);
  // The toolkit as it resolves (/usr/local/cuda-13.0 where /usr/local/cuda links to it), with no
  // toolkit on PATH: CMake then names its library folders so in each device link, as on a
  // machine whose PATH lacks the toolkit; the daemon knows them as its own toolkit's.
  const fs::path nvcc = fs::canonical(nvcc_);
  const std::string toolkit = "CUDA_PATH=" + nvcc.parent_path().parent_path().string();
  const std::string path = "PATH=/usr/bin:/bin";
  auto configure = [&](const std::string& build, bool launched) {
    std::vector<std::string> argv = {"/usr/bin/env", toolkit, path, "/usr/bin/cmake", "-S", source.string(), "-B",
                                     (m_dir.path() / build).string(), "-G", "Ninja",
                                     "-DCMAKE_CUDA_COMPILER=" + (launched ? masquerade : nvcc).string()};
    if (launched) argv.push_back(std::string("-DCMAKE_CXX_COMPILER_LAUNCHER=") + KCACHE_CLI_PATH);
    ProcessResult r = run(argv);
    EXPECT_EQ(r.exit_code, 0) << r.output << r.error_output;
  };
  auto build = [&](const std::string& build, const std::string& target = {}) {
    std::vector<std::string> argv = {"/usr/bin/env", toolkit, path, "/usr/bin/ninja", "-C", (m_dir.path() / build).string()};
    if (!target.empty()) argv.push_back(target);
    ProcessResult r = run(argv);
    EXPECT_EQ(r.exit_code, 0) << r.output << r.error_output;
  };
  configure("plain", false);
  build("plain");
  configure("launched", true);
  counts();
  build("launched");
  auto cold = counts();
  EXPECT_EQ(cold["launcher.compiles"], 4) << "saxpy.cu, reduce.cu and the two executables' sources";
  EXPECT_EQ(cold["cicc.miss"] + cold["cicc.hit"], 4 * 9) << "each file x 9 archs";
  EXPECT_EQ(cold["launcher.device_links"], 2) << "each executable's device link, through kcache as nvcc";
  EXPECT_EQ(cold["nvlink.miss"] + cold["nvlink.hit"], 2 * 9) << "each device link x 9 archs, on the daemon";
  EXPECT_EQ(cold["nvlink.local"], 0);
  EXPECT_EQ(cold["device_link.miss"], 2);
  for (const std::string& program : {"app_saxpy", "app_reduce"}) {
    const std::string link = "CMakeFiles/" + program + ".dir/cmake_device_link.o";
    EXPECT_TRUE(read_all(m_dir.path() / "launched" / link) == read_all(m_dir.path() / "plain" / link))
        << link << ": the device link differs from nvcc's";
  }
  EXPECT_EQ(cold["uncacheable.compiler_c++"] + cold["uncacheable.compiler_g++"], 1) << "report.cpp: C++, run as it would";
  const std::vector<std::string> programs = {"app_saxpy", "app_reduce"};
  for (const std::string& program : programs) {
    std::string plain = device_code_and_symbols(m_dir.path() / "plain" / program);
    EXPECT_EQ(device_code_and_symbols(m_dir.path() / "launched" / program), plain) << program;
  }
  // Warm, after ninja clean: every whole compile hits, and the executables are the same.
  build("launched", "clean");
  build("launched");
  auto warm = counts();
  EXPECT_EQ(warm["nvcc.local_hit"], 4) << "this machine's copies of the objects it offered";
  EXPECT_EQ(warm["direct.hit"], 2) << "no preprocessor ran (the two files without -lineinfo, whose line tables hold files' times)";
  EXPECT_EQ(warm["cicc.miss"] + warm["ptxas.miss"] + warm["host.miss"], 0);
  EXPECT_EQ(warm["device_link.local_hit"], 2) << "each device link's object, named by its inputs' bytes";
  EXPECT_EQ(warm["device_link.without_grpc"], 2) << "answered by kcache itself, before kcache-grpc started";
  EXPECT_EQ(warm["nvlink.hit"] + warm["nvlink.miss"] + warm["nvlink.local"], 0) << "no nvlink ran";
  for (const std::string& program : {"app_saxpy", "app_reduce"}) {
    const std::string link = "CMakeFiles/" + program + ".dir/cmake_device_link.o";
    EXPECT_TRUE(read_all(m_dir.path() / "launched" / link) == read_all(m_dir.path() / "plain" / link)) << link << " warm";
  }
  for (const std::string& program : programs) {
    EXPECT_EQ(device_code_and_symbols(m_dir.path() / "launched" / program),
              device_code_and_symbols(m_dir.path() / "plain" / program))
        << program << " after ninja clean";
  }
  // A device-side edit of the library: its device link misses (and its nvlink steps run again).
  std::string saxpy = read_all(source / "src" / "saxpy.cu");
  std::ofstream(source / "src" / "saxpy.cu") << saxpy << "\n__device__ int kcache_test_edit() { return 1; }\n";
  build("launched");
  auto edited = counts();
  EXPECT_EQ(edited["device_link.miss"], 2);
  EXPECT_EQ(edited["nvlink.miss"], 2 * 9);
}

}  // namespace
}  // namespace kcache::test
