#include "compile/source_pipeline.hpp"

#include <algorithm>
#include <regex>

#include "compile/cubin.hpp"
#include "compile/llvm_common.hpp"
#include "kcache/includes.hpp"

namespace kcache::server {
namespace {

// The header NVRTC could not find, from its log ("could not open source file "x"").
std::string missing_header(const std::string& log) {
  static const std::regex k_missing(R"(open source file \"([^\"]+)\")");
  std::smatch m;
  return std::regex_search(log, m, k_missing) ? m[1].str() : std::string();
}

std::string virtual_arch(const std::string& arch) { return "compute_" + arch.substr(3); }

}  // namespace

Expected<CompileOutput> compile_source(const Toolchain& toolchain, const CompileJob& job) {
  if (!toolchain.nvrtc) {
    return make_error(ErrorCode::k_failed_precondition,
                      "CUDA C++ jobs need NVRTC (lib64/libnvrtc.so) under " + toolchain.cuda_root.string());
  }
  if (job.modules.size() != 1) return make_error(ErrorCode::k_internal, "a source job carries one source");
  constexpr std::string_view k_source_name = "kernel.cu";
  if (auto ok = check_includes(k_source_name, job.modules[0], job.headers); !ok) return ok.error();
  // NVRTC looks for a "quoted" include beside the file that includes it. For the toolkit's
  // headers that must stay (cooperative_groups/details/ includes "info.h" so), so
  // --no-source-include is out; the source's own folder is an empty one of ours instead.
  TempDir scratch;
  if (scratch.path().empty()) return make_error(ErrorCode::k_internal, "cannot create a scratch folder");
  std::string source_path = (scratch.path() / k_source_name).string();
  std::string scratch_prefix = scratch.path().string() + "/";
  auto unscratched = [&](std::string text) {  // messages name kernel.cu, not our folder
    for (std::size_t at = text.find(scratch_prefix); at != std::string::npos; at = text.find(scratch_prefix, at)) {
      text.erase(at, scratch_prefix.size());
    }
    return text;
  };

  Nvrtc::Program program;
  program.source = job.modules[0];
  program.source_name = source_path;
  program.headers = job.headers;
  program.name_expressions = job.spec.source.name_expressions;
  std::vector<std::string> base = job.spec.source.nvrtc_options;
  for (const std::filesystem::path& dir : toolchain.cuda_include_dirs) base.push_back("--include-path=" + dir.string());

  CompileOutput out;
  auto run = [&](std::vector<std::string> arch_options) -> Expected<Nvrtc::Output> {
    program.options = base;
    program.options.insert(program.options.end(), arch_options.begin(), arch_options.end());
    auto compiled = toolchain.nvrtc->compile(program, ErrorCode::k_invalid_argument);
    if (!compiled) {
      Error e = compiled.error();
      e.message = unscratched(std::move(e.message));
      for (std::string& line : e.details) line = unscratched(std::move(line));
      compiled = e;
      std::string header = missing_header(compiled.error().message);
      if (!header.empty()) {
        Error e = compiled.error();
        // NVRTC's log stays in the details, printed once.
        e.message = "the source includes \"" + header + "\", which the job did not carry and the toolkit (" +
                    toolchain.cuda_root.string() + "/include) does not have. NVRTC compiles a job with the "
                    "headers it carries: send your own with -I DIR; a file that includes the C or C++ standard "
                    "library (<cstdio>, <vector>) builds with `kcache nvcc -c FILE` instead (nvcc in front of the "
                    "cache, docs/build-farms.md)";
        if (e.details.empty()) e.details.push_back(unscratched(std::move(compiled.error().message)));
        return e;
      }
      return compiled;
    }
    // NVRTC's log holds ptxas's resource usage too, when asked for (below): read apart.
    std::string log = without_resource_usage(compiled->log);
    if (!log.empty()) out.diagnostics.push_back(unscratched(std::move(log)));
    return compiled;
  };

  std::vector<std::string> archs;
  for (const ImageRequest& want : job.images) {
    if (std::find(archs.begin(), archs.end(), want.arch) == archs.end()) archs.push_back(want.arch);
  }
  std::vector<Image> made;
  for (const std::string& arch : archs) {
    auto wants = [&](ImageKind kind) {
      return std::any_of(job.images.begin(), job.images.end(),
                         [&](const ImageRequest& r) { return r.arch == arch && r.kind == kind; });
    };
    auto add = [&](ImageKind kind, std::string data, std::vector<KernelInfo> kernels,
                   const std::vector<std::pair<std::string, std::string>>& lowered) {
      Image image = make_image({arch, kind}, std::move(data), std::move(kernels));
      image.meta.lowered_names = lowered;
      made.push_back(std::move(image));
    };
    if (wants(ImageKind::ptx) || wants(ImageKind::cubin)) {
      // ptxas's -v report (registers, memory, spills per kernel) comes in NVRTC's log; it changes
      // nothing in the cubin.
      std::vector<std::string> options = {"-arch=" + arch};
      if (wants(ImageKind::cubin)) options.push_back("--ptxas-options=-v");
      auto compiled = run(options);
      if (!compiled) return compiled.error();
      std::vector<KernelInfo> kernels = ptx_entries(compiled->ptx);
      std::vector<KernelInfo> cubin_kernels = kernels;
      read_resource_usage(compiled->log, cubin_kernels);
      if (wants(ImageKind::ptx)) add(ImageKind::ptx, std::move(compiled->ptx), kernels, compiled->lowered_names);
      if (wants(ImageKind::cubin)) {
        if (compiled->cubin.empty()) return make_error(ErrorCode::k_internal, "NVRTC made no cubin for " + arch);
        add(ImageKind::cubin, std::move(compiled->cubin), std::move(cubin_kernels), compiled->lowered_names);
      }
    }
    if (wants(ImageKind::ltoir)) {
      auto compiled = run({"-arch=" + virtual_arch(arch), "-dlto"});
      if (!compiled) return compiled.error();
      if (compiled->ltoir.empty()) return make_error(ErrorCode::k_internal, "NVRTC made no LTO-IR for " + arch);
      add(ImageKind::ltoir, std::move(compiled->ltoir), {}, compiled->lowered_names);
    }
  }
  for (const ImageRequest& want : job.images) {
    auto found = std::find_if(made.begin(), made.end(), [&](const Image& i) { return i.meta.id() == want; });
    if (found == made.end()) return make_error(ErrorCode::k_internal, "no image for " + want.arch);
    out.images.push_back(std::move(*found));
    made.erase(found);
  }
  return out;
}

}  // namespace kcache::server
