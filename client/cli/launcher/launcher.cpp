#include "launcher/launcher.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "kcache/search_path.hpp"
#include "launcher/direct_key.hpp"
#include "launcher/launch.hpp"
#include "launcher/options.hpp"

namespace kcache::launcher {

void exec_compiler(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "kcache: cannot run %s: %s\n", argv[0].c_str(), std::strerror(errno));
  std::exit(127);
}

std::optional<int> launch_if_compiler(int argc, char** argv) {
  if (argc < 1) return std::nullopt;
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string compiler;
  // Run under a compiler's name (a masquerade symlink): the real one is the next on PATH.
  if (CompilerKind kind = compiler_kind(argv[0]); kind != CompilerKind::none) {
    const std::string name = basename_of(argv[0]);
    compiler = kind == CompilerKind::nvlink ? real_nvlink(argv[0]) : next_on_path(name);
    // nvcc where the toolkit's folder is not on PATH (CMake names its CUDA compiler by path):
    // the toolkit's, as CUDA_PATH, CUDA_HOME or the usual place name it.
    if (compiler.empty() && kind == CompilerKind::nvcc) compiler = toolkit_nvcc();
    if (compiler.empty()) {
      std::fprintf(stderr, "kcache: run as %s, but no other %s is on PATH\n", name.c_str(), name.c_str());
      return 127;
    }
  } else if (!args.empty() && compiler_kind(args.front()) != CompilerKind::none) {
    compiler = args.front();  // `kcache COMPILER ARGS...` (a build's compiler launcher)
    args.erase(args.begin());
  } else {
    return std::nullopt;  // a kcache subcommand
  }
  CompilerKind kind = compiler_kind(compiler);
  if (kind == CompilerKind::nvcc) return launch_nvcc(compiler, args);
  if (kind == CompilerKind::clang && is_cuda_compile(args)) return launch_clang(compiler, args);
  if (kind == CompilerKind::clang && is_offload_link(args)) launch_clang_link(compiler, std::move(args));
  if (kind == CompilerKind::nvlink) return launch_nvlink(compiler, args);
  // Host C and C++ are not kcache's: the compiler runs as it would, in this process's place, so a
  // build using kcache as its launcher for every language never breaks.
  LocalStats stats;
  stats.add("uncacheable.compiler " + basename_of(compiler));
  stats.write();
  args.insert(args.begin(), compiler);
  exec_compiler(args);
}

}  // namespace kcache::launcher
