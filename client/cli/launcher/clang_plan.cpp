#include "launcher/clang_plan.hpp"

#include <algorithm>
#include <filesystem>
#include <span>

#include "kcache/sha256.hpp"
#include "launcher/nvcc_plan.hpp"
#include "launcher/options.hpp"

namespace kcache::launcher {
namespace {

std::string base_name(std::string_view path) {
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

bool has(const std::vector<std::string>& argv, std::string_view word) {
  return std::find(argv.begin(), argv.end(), word) != argv.end();
}

}  // namespace

bool is_device_compile(const std::vector<std::string>& argv) {
  return has(argv, "-fcuda-is-device") && has(argv, "-S") && has(argv, "nvptx64-nvidia-cuda");
}

bool is_host_compile(const std::vector<std::string>& argv) { return !has(argv, "-fcuda-is-device") && has(argv, "-emit-obj"); }

ClangPlanOrReason read_clang_plan(std::string_view text) {
  ClangPlan plan;
  for (std::size_t begin = 0; begin < text.size();) {
    std::size_t end = std::min(text.find('\n', begin), text.size());
    std::string_view line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.starts_with(" \"")) {
      auto words = shell_words(line, {});
      if (!words || words->empty()) return {std::nullopt, "plan syntax (clang)"};
      plan.commands.push_back(std::move(*words));
    } else if (line.find(": warning: ") != std::string_view::npos || line.find(": note: ") != std::string_view::npos) {
      plan.driver_diagnostics += std::string(line) + "\n";
    }
  }
  if (plan.commands.empty()) return {std::nullopt, "empty plan (clang)"};
  static const std::vector<std::string_view> k_local = {"fatbinary", "llvm-offload-binary", "clang-offload-bundler",
                                                        "clang-offload-packager"};
  for (const std::vector<std::string>& argv : plan.commands) {
    std::string program = base_name(argv.front());
    bool cc1 = argv.size() > 2 && argv[1] == "-cc1";
    bool known = program == "ptxas" || std::find(k_local.begin(), k_local.end(), program) != k_local.end() ||
                 (cc1 && (is_device_compile(argv) || is_host_compile(argv)));
    if (!known) return {std::nullopt, "plan step " + program + " (clang)"};
    if (!cc1) continue;
    if (plan.source.empty()) plan.source = argv.back();
    if (argv.back() != plan.source) return {std::nullopt, "several sources (clang)"};
  }
  return {std::move(plan), {}};
}

void name_the_unit(ClangPlan& plan, std::string_view unit_path) {
  std::string cuid = "-cuid=" + to_hex(sha256("kcache-cuid\0" + std::string(unit_path))).substr(0, 16);
  for (std::vector<std::string>& argv : plan.commands) {
    for (std::string& a : argv) {
      if (a.starts_with("-cuid=")) a = cuid;
    }
  }
}

ClangSplit split_cc1(const std::vector<std::string>& argv, std::string_view action, const std::string& text, bool deps,
                     const std::string& output, const std::string& dependency_file) {
  ClangSplit out;
  if (argv.empty()) return out;
  out.preprocess.push_back(argv.front());
  out.compile.push_back(argv.front());
  const std::span<const std::string> words(argv.begin() + 1, argv.end());
  std::vector<Arg> args = read_args(cc1_options(), words);
  for (std::size_t k = 0; k < args.size(); ++k) {
    const Arg& a = args[k];
    auto first = words.begin() + static_cast<std::ptrdiff_t>(a.index);
    std::vector<std::string> written(first, first + static_cast<std::ptrdiff_t>(a.count));
    const bool last = k + 1 == args.size();  // the source
    if (written.front() == action) {
      out.preprocess.push_back("-E");
      out.compile.push_back(written.front());
    } else if (a.affects(k_output)) {
      out.preprocess.insert(out.preprocess.end(), {"-o", text});
      out.compile.insert(out.compile.end(), {"-o", output});
    } else if (a.affects(k_language)) {
      out.preprocess.insert(out.preprocess.end(), written.begin(), written.end());
      out.compile.insert(out.compile.end(), {"-x", "cuda-cpp-output"});
    } else if (last) {
      out.preprocess.insert(out.preprocess.end(), written.begin(), written.end());
      out.compile.push_back(text);
    } else if (a.affects(k_preprocessor)) {
      // The preprocessor's alone; the dependency file's only where asked (the host side).
      if (a.affects(k_dependency) && !deps) continue;
      if (a.spelling == "-dependency-file" && a.count == 2) {
        out.dependency_target = a.value;
        written.back() = dependency_file;
      }
      out.preprocess.insert(out.preprocess.end(), written.begin(), written.end());
    } else {
      out.preprocess.insert(out.preprocess.end(), written.begin(), written.end());
      out.compile.insert(out.compile.end(), written.begin(), written.end());
    }
  }
  return out;
}

ClangNvlink plan_clang_nvlink(const std::vector<std::string>& argv, std::string_view work) {
  ClangNvlink out;
  if (argv.empty()) return out.refusal = "no program", out;
  out.argv.push_back(argv.front());
  std::string arch;
  std::vector<std::string> folders, inputs;
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    const bool has_value = i + 1 < argv.size();
    if ((a == "-o" || a == "--output-file") && has_value) {
      out.output = argv[++i];
    } else if ((a == "-arch" || a == "--arch") && has_value) {
      arch = argv[++i];
    } else if (a.starts_with("-arch=") || a.starts_with("--arch=")) {
      arch = a.substr(a.find('=') + 1);
    } else if (a == "-L" && has_value) {
      folders.push_back(argv[++i]);
    } else if (a.starts_with("-L") && a.size() > 2) {
      folders.push_back(a.substr(2));
    } else if (a == "-m64") {
      continue;  // nvlink's default, which it writes as -m 64 either way
    } else if (a.starts_with("-")) {
      return out.refusal = "nvlink option " + a.substr(0, 32) + " (clang)", out;  // -l, -g, -v, ...
    } else if (a.ends_with(".cubin")) {
      inputs.push_back(a);
    } else {
      return out.refusal = "nvlink input " + std::filesystem::path(a).extension().string() + " (clang)", out;
    }
  }
  if (out.output.empty() || inputs.empty()) return out.refusal = "nvlink without an output or an input (clang)", out;
  if (!arch.starts_with("sm_")) return out.refusal = "nvlink -arch " + arch.substr(0, 16) + " (clang)", out;
  out.argv.insert(out.argv.end(), {"-o", std::string(work) + "image.cubin", "-arch=" + arch});
  for (const std::string& folder : folders) out.argv.push_back("-L" + folder);
  for (const std::string& input : inputs) {
    std::string name = std::string(work) + "input-" + std::to_string(out.inputs.size()) + ".cubin";
    out.inputs.emplace_back(input, name);
    out.argv.push_back(name);
  }
  return out;
}

}  // namespace kcache::launcher
