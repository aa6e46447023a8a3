#include "launcher/launcher.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "launcher/launch.hpp"

namespace kcache::launcher {
namespace {

namespace fs = std::filesystem;

bool is_nvcc(std::string_view name) { return basename_of(name) == "nvcc"; }

bool is_clang(std::string_view name) {
  std::string base = basename_of(name);
  return base == "clang++" || base == "clang" || base.starts_with("clang++-") || base.starts_with("clang-");
}

// The nvcc that PATH finds after this program (kcache installed as nvcc early on PATH).
std::string next_nvcc() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "";
  for (std::size_t begin = 0; begin <= p.size();) {
    std::size_t end = std::min(p.find(':', begin), p.size());
    fs::path candidate = fs::path(p.substr(begin, end - begin)) / "nvcc";
    begin = end + 1;
    if (::access(candidate.c_str(), X_OK) != 0) continue;
    fs::path real = fs::canonical(candidate, ec);
    if (ec || real == self || real.filename() == "kcache" || real.filename() == "kcache-grpc") continue;
    return candidate.string();
  }
  return {};
}

// Runs the real compiler in place of this process: its outputs, diagnostics and exit code.
[[noreturn]] void exec_compiler(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "kcache: cannot run %s: %s\n", argv[0].c_str(), std::strerror(errno));
  std::exit(127);
}

}  // namespace

std::optional<int> launch_if_compiler(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (argc >= 1 && is_nvcc(argv[0])) {
    std::string real = next_nvcc();
    if (real.empty()) {
      std::fprintf(stderr, "kcache: run as nvcc, but no other nvcc is on PATH\n");
      return 127;
    }
    return launch_nvcc(real, args);
  }
  if (args.empty()) return std::nullopt;
  const std::string first = args.front();
  std::string name = basename_of(first);
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (is_nvcc(first)) return launch_nvcc(first, rest);
  if (is_clang(first) && is_cuda_compile(rest)) return launch_clang(first, rest);
  if (is_clang(first) || name == "g++" || name == "gcc" || name == "c++" || name == "cc") {
    // Host C and C++ are not kcache's: the compiler runs as it would, in this process's place,
    // so a build using kcache as its launcher for every language never breaks.
    LocalStats stats;
    stats.add("uncacheable.compiler " + name);
    stats.write();
    exec_compiler(args);
  }
  return std::nullopt;
}

}  // namespace kcache::launcher
