#include "compile/cubin.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "compile/device_symbols.hpp"
#include "compile/llvm_common.hpp"
#include "compile/nvjitlink.hpp"
#include "kcache/process.hpp"

namespace kcache::server {
namespace {

// The split compile (ptxas --split-compile, nvJitLink -split-compile) is always asked for with this
// count: the assembler writes its command line into the cubin (.note.nv.tkinfo), so a count that
// followed the load would make other bytes for one key. How many cores it really takes is the
// CPUs the job was lent (CompileJob::cpus: its worker is pinned to them): one when the machine
// is busy, more when other cores are idle.
constexpr int k_split_compile = 8;

// A tool's run for a job: merged output, killed at the deadline or past 64 MiB of output.
ProcessOptions tool_options(std::chrono::steady_clock::time_point deadline) {
  ProcessOptions options;
  options.deadline = deadline;
  options.kill_past_max_output = true;
  return options;
}

struct Assembled {
  std::string cubin;
  std::string log;  // resource usage per kernel, warnings
};

// ptxas as a process: one module straight to a cubin; several (or the device runtime) as
// relocatable objects, then nvlink.
Expected<Assembled> assemble_with_ptxas(const Toolchain& toolchain, const CompileJob& job,
                                        const std::vector<std::string_view>& ptx, const std::string& arch,
                                        bool device_runtime, ErrorCode failure_code) {
  TempDir dir;
  if (dir.path().empty()) return make_error(ErrorCode::k_internal, "cannot create a scratch folder for ptxas");
  bool link = device_runtime || ptx.size() > 1;
  std::filesystem::path out = dir.path() / "module.cubin";
  std::vector<std::string> objects;
  std::string log;
  for (std::size_t i = 0; i < ptx.size(); ++i) {
    std::filesystem::path in = dir.path() / ("module" + std::to_string(i) + ".ptx");
    std::filesystem::path object = dir.path() / ("module" + std::to_string(i) + ".o");
    {
      std::ofstream f(in, std::ios::binary);
      f.write(ptx[i].data(), static_cast<std::streamsize>(ptx[i].size()));
      if (!f) return make_error(ErrorCode::k_internal, "cannot write " + in.string());
    }
    std::vector<std::string> argv = {toolchain.ptxas.string(), "-arch=" + arch, "-v",
                                     "--opt-level=" + std::to_string(job.spec.options.opt_level)};
    if (job.spec.options.debug_info) argv.push_back("--device-debug");
    if (job.spec.options.lineinfo) argv.push_back("--generate-line-info");
    argv.push_back("--split-compile=" + std::to_string(k_split_compile));
    if (link) argv.push_back("--compile-only");
    argv.insert(argv.end(), {"-o", (link ? object : out).string(), in.string()});
    auto run = run_tool(toolchain, argv, dir.path(), tool_options(job.deadline));
    if (!run) return run.error();
    if (run->exit_code != 0) {
      return make_error(failure_code, run->signal != 0 ? "ptxas was killed by signal " + std::to_string(run->signal)
                                                       : "ptxas rejected the PTX for " + arch + ":\n" + run->output);
    }
    log += run->output;
    objects.push_back(object.string());
  }
  if (link) {
    std::vector<std::string> argv = {toolchain.nvlink.string(), "-arch=" + arch};
    argv.insert(argv.end(), objects.begin(), objects.end());
    if (device_runtime) argv.push_back(toolchain.cudadevrt.string());
    argv.insert(argv.end(), {"-o", out.string()});
    auto linked = run_tool(toolchain, argv, dir.path(), tool_options(job.deadline));
    if (!linked) return linked.error();
    if (linked->exit_code != 0) return make_error(failure_code, "nvlink failed for " + arch + ":\n" + linked->output);
    log += linked->output;
  }
  std::ifstream f(out, std::ios::binary);
  return Assembled{std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), log};
}

Expected<Assembled> assemble_with_nvjitlink(const Toolchain& toolchain, const CompileJob& job,
                                            const std::vector<std::string_view>& ptx, const std::string& arch,
                                            bool device_runtime, ErrorCode failure_code) {
  // nvJitLink takes only -O0/-O3 itself; ptxas inside it takes every level.
  std::vector<std::string> options = {"-Xptxas=--opt-level=" + std::to_string(job.spec.options.opt_level)};
  if (job.spec.options.debug_info) options.push_back("-g");
  if (job.spec.options.lineinfo) options.push_back("-lineinfo");
  options.push_back("-split-compile=" + std::to_string(k_split_compile));
  std::vector<std::filesystem::path> libraries;
  if (device_runtime) libraries.push_back(toolchain.cudadevrt);
  auto result = toolchain.nvjitlink->assemble(ptx, arch, options, libraries, failure_code);
  if (!result) return result.error();
  return Assembled{std::move(result->cubin), std::move(result->info_log)};
}

}  // namespace

void read_resource_usage(const std::string& log, std::vector<KernelInfo>& kernels) {
  static const std::regex compiling(R"(Compiling entry function '([^']+)')");
  static const std::regex frame(R"((\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads)");
  static const std::regex used(R"(Used (\d+) registers)");
  static const std::regex smem(R"((\d+) bytes smem)");
  KernelInfo* current = nullptr;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, compiling)) {
      auto it = std::find_if(kernels.begin(), kernels.end(), [&](const KernelInfo& k) { return k.name == m[1]; });
      current = it == kernels.end() ? &kernels.emplace_back(KernelInfo{.name = m[1]}) : &*it;
      continue;
    }
    if (current == nullptr) continue;
    if (std::regex_search(line, m, frame)) {
      current->local_bytes = std::stoull(m[1]);
      current->spill_stores = static_cast<std::uint32_t>(std::stoul(m[2]));
      current->spill_loads = static_cast<std::uint32_t>(std::stoul(m[3]));
    }
    if (std::regex_search(line, m, used)) current->registers = static_cast<std::uint32_t>(std::stoul(m[1]));
    if (std::regex_search(line, m, smem)) current->shared_bytes = std::stoull(m[1]);
  }
}

std::string without_resource_usage(const std::string& log) {
  std::string out;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    bool usage = line.starts_with("ptxas info") || line.find("bytes stack frame, ") != std::string::npos;
    if (!usage) out += line + "\n";
  }
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<KernelInfo> ptx_entries(std::string_view ptx) {
  static const std::regex entry(R"(\.entry\s+([A-Za-z_$%][A-Za-z0-9_$%]*))");
  std::vector<KernelInfo> out;
  std::string text(ptx);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), entry); it != std::sregex_iterator(); ++it) {
    out.push_back(KernelInfo{.name = (*it)[1]});
  }
  return out;
}

Expected<Image> assemble_cubin(const Toolchain& toolchain, const CompileJob& job, const std::vector<std::string_view>& ptx,
                               const std::string& arch, bool user_ptx, std::vector<std::string>& diagnostics) {
  ErrorCode failure_code = user_ptx ? ErrorCode::k_invalid_argument : ErrorCode::k_internal;
  bool device_runtime = std::any_of(ptx.begin(), ptx.end(), [](std::string_view p) { return ptx_uses_device_runtime(p); });
  if (device_runtime && (toolchain.cudadevrt.empty() || (!toolchain.nvjitlink && toolchain.nvlink.empty()))) {
    return make_error(ErrorCode::k_failed_precondition,
                      "the module launches kernels from the device (dynamic parallelism), which needs libcudadevrt.a "
                      "(and nvJitLink or nvlink) from the CUDA toolkit under " + toolchain.cuda_root.string());
  }
  if (ptx.size() > 1 && !toolchain.nvjitlink && toolchain.nvlink.empty()) {
    return make_error(ErrorCode::k_failed_precondition,
                      "linking several PTX modules into one cubin needs nvJitLink or nvlink from the CUDA toolkit "
                      "under " + toolchain.cuda_root.string());
  }
  auto assembled = toolchain.nvjitlink ? assemble_with_nvjitlink(toolchain, job, ptx, arch, device_runtime, failure_code)
                                       : assemble_with_ptxas(toolchain, job, ptx, arch, device_runtime, failure_code);
  if (!assembled) return assembled.error();
  if (assembled->cubin.empty()) return make_error(ErrorCode::k_internal, "no cubin came back for " + arch);
  std::istringstream lines(assembled->log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("warning") != std::string::npos) diagnostics.push_back(line);
  }
  std::vector<KernelInfo> kernels;
  for (std::string_view p : ptx) {
    for (KernelInfo& k : ptx_entries(p)) kernels.push_back(std::move(k));
  }
  read_resource_usage(assembled->log, kernels);
  return make_image({arch, ImageKind::cubin}, std::move(assembled->cubin), std::move(kernels));
}

}  // namespace kcache::server
