// The jail's cost per step (server/compile/jail.hpp): a small ptxas step and a small clang device
// step, each run plainly and in the jail, interleaved so that both see the same machine. Prints
// and writes (to --out, bench/results by default) each one's p50 and p99 and the jail's cost.
//
//   kcache_bench_jail [--rounds 40] [--out bench/results]
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "compile/jail.hpp"

namespace {

namespace fs = std::filesystem;
using kcache::ProcessOptions;
using kcache::server::Jail;
using kcache::server::JailPolicy;
using Clock = std::chrono::steady_clock;

const fs::path k_cuda = KCACHE_CUDA_ROOT;

// A kernel small enough that the tool's own work is a few tens of milliseconds.
constexpr const char* k_ptx = R"(.version 8.0
.target sm_80
.address_size 64
.visible .entry scale(.param .u64 x) {
  .reg .b64 %rd<3>; .reg .f32 %f<3>; .reg .b32 %r<2>;
  ld.param.u64 %rd1, [x];
  cvta.to.global.u64 %rd2, %rd1;
  ld.global.f32 %f1, [%rd2];
  add.f32 %f2, %f1, %f1;
  st.global.f32 [%rd2], %f2;
  ret;
}
)";
constexpr const char* k_cuda_text =
    "# 1 \"k.cu\"\nextern \"C\" __attribute__((global)) void scale(float* x) { x[0] = x[0] * 2.0f; }\n";

struct Tool {
  std::string name;
  std::vector<std::string> argv;
  std::string input_name, input;
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The jail's cost per build step: ptxas and clang, plain and jailed"};
  int rounds = 40;
  fs::path out = fs::path(KCACHE_SOURCE_DIR) / "bench" / "results";
  app.add_option("--rounds", rounds, "Runs of each tool each way")->capture_default_str();
  app.add_option("--out", out, "Folder for jail.md and jail.csv")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  JailPolicy policy;
  policy.read_only = {k_cuda};
  Jail jailed = Jail::probe(policy);
  if (jailed.mode() != Jail::Mode::bwrap) {
    std::fprintf(stderr, "no jail on this machine: %s\n", jailed.reason().c_str());
    return 1;
  }
  Jail plain = Jail::none("the reference");
  std::vector<Tool> tools;
  if (fs::exists(k_cuda / "bin" / "ptxas")) {
    tools.push_back({"ptxas (sm_80)", {(k_cuda / "bin" / "ptxas").string(), "-arch=sm_80", "-o", "k.cubin", "k.ptx"}, "k.ptx", k_ptx});
  }
  if (fs::exists("/usr/lib/llvm-22/bin/clang")) {
    tools.push_back({"clang -cc1 (sm_80)",
                     {"/usr/lib/llvm-22/bin/clang", "-cc1", "-triple", "nvptx64-nvidia-cuda", "-fcuda-is-device", "-S",
                      "-O2", "-target-cpu", "sm_80", "-o", "k.s", "-x", "cuda-cpp-output", "k.cui"},
                     "k.cui",
                     k_cuda_text});
  }
  if (tools.empty()) {
    std::fprintf(stderr, "neither ptxas nor clang-22 is here\n");
    return 1;
  }
  std::map<std::string, std::vector<double>> ms;  // "tool|plain" and "tool|jail"
  for (int round = 0; round < rounds + 2; ++round) {
    for (const Tool& tool : tools) {
      for (const Jail* jail : {&plain, &jailed}) {
        std::string pattern = (fs::temp_directory_path() / "kcache-bench-jail-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) return 1;
        std::ofstream(fs::path(pattern) / tool.input_name) << tool.input;
        ProcessOptions options;
        options.deadline = Clock::now() + std::chrono::seconds(60);
        auto start = Clock::now();
        auto ran = jail->run(tool.argv, pattern, options);
        double took = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
        std::error_code ec;
        fs::remove_all(pattern, ec);
        if (!ran || ran->exit_code != 0) {
          std::fprintf(stderr, "%s failed %s: %s\n", tool.name.c_str(), jail == &plain ? "plainly" : "in the jail",
                       ran ? ran->output.c_str() : ran.error().message.c_str());
          return 1;
        }
        if (round >= 2) ms[tool.name + (jail == &plain ? "|plain" : "|jail")].push_back(took);  // 2 warm-up rounds
      }
    }
  }
  char date[32];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&now));
  std::string md = "## The jail's cost per step\n\n`build/bench/kcache_bench_jail` on " + std::string(date) + ": " +
                   std::to_string(rounds) +
                   " runs of each tool each way, interleaved, each in a fresh folder; milliseconds of wall time for "
                   "the whole process (the jail: prlimit, setpriv where the daemon is root, bwrap with its namespaces, "
                   "binds and seccomp filter, then the tool).\n\n"
                   "| tool | plain p50 | jailed p50 | cost p50 | plain p99 | jailed p99 | cost p99 |\n|---|---|---|---|---|---|---|\n";
  std::string csv = "tool,plain_p50_ms,jail_p50_ms,plain_p99_ms,jail_p99_ms\n";
  for (const Tool& tool : tools) {
    const auto& p = ms[tool.name + "|plain"];
    const auto& j = ms[tool.name + "|jail"];
    double p50 = percentile(p, 0.5), j50 = percentile(j, 0.5), p99 = percentile(p, 0.99), j99 = percentile(j, 0.99);
    char line[512];
    std::snprintf(line, sizeof line, "| %s | %.1f | %.1f | **%+.1f** | %.1f | %.1f | %+.1f |\n", tool.name.c_str(), p50,
                  j50, j50 - p50, p99, j99, j99 - p99);
    md += line;
    std::snprintf(line, sizeof line, "%s,%.2f,%.2f,%.2f,%.2f\n", tool.name.c_str(), p50, j50, p99, j99);
    csv += line;
  }
  std::fputs(md.c_str(), stdout);
  fs::create_directories(out);
  std::ofstream(out / "jail.md") << md;
  std::ofstream(out / "jail.csv") << csv;
  return 0;
}
