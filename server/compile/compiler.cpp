#include "compile/compiler.hpp"

#include <algorithm>

#include "compile/amdgpu_pipeline.hpp"
#include "compile/host_pipeline.hpp"
#include "compile/nvptx_pipeline.hpp"
#include "compile/source_pipeline.hpp"
#include "kcache/amd_target.hpp"

namespace kcache::server {
namespace {

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

}  // namespace

Expected<void> Compiler::check_supported(const JobSpec& spec, const std::vector<ImageRequest>& images) const {
  if (spec.side == Side::host) {
    if (spec.format == InputFormat::ptx) {
      return make_error(ErrorCode::k_invalid_argument, "PTX is device code: send it with side device");
    }
    return {};
  }
  if (targets_amd(spec)) {
    if (!m_toolchain.amdgpu_present) {
      return make_error(ErrorCode::k_failed_precondition,
                        "AMD jobs need LLVM's AMDGPU backend, and the LLVM " + m_toolchain.llvm_version +
                            " this kcached links has none");
    }
    for (const ImageRequest& want : images) {
      auto target = parse_amd_target(want.arch);
      if (target && target->processor->is_generic() && spec.amd_code_object_cap != 0) {
        return make_error(ErrorCode::k_invalid_argument,
                          want.arch + " is a generic target, whose code objects are version 6, and the client's "
                          "runtime loads up to version " + std::to_string(spec.amd_code_object_cap) +
                          ": ask for the GPU's own target (gfx90a, gfx1030, ...), or update to ROCm 6.2 or newer");
      }
      if (want.kind == ImageKind::hsaco && m_toolchain.lld.empty()) {
        return make_error(ErrorCode::k_failed_precondition,
                          "hsaco needs ld.lld to link the code object, and this kcached found none (install lld-22); "
                          "ask for amdgcn assembly instead");
      }
    }
    return {};
  }
  if (spec.is_source()) {
    if (m_toolchain.nvrtc_version.empty()) {
      return make_error(ErrorCode::k_failed_precondition,
                        "CUDA C++ jobs need NVRTC, and this kcached has none: " +
                            (m_toolchain.cuda_present ? "no usable lib64/libnvrtc.so under " + m_toolchain.cuda_root.string()
                                                      : "no CUDA toolkit under " + m_toolchain.cuda_root.string()) +
                            " (start kcached with --cuda-root pointing at a toolkit)");
    }
    if (spec.ptx_isa_cap != 0) {
      return make_error(ErrorCode::k_failed_precondition,
                        "CUDA C++ jobs compile with this kcached's NVRTC " + m_toolchain.nvrtc_version +
                            ", whose PTX and cubins the stated (older) driver cannot load: update the driver, or "
                            "leave driver_version out to get images for this toolkit");
    }
    for (const ImageRequest& want : images) {
      if (!contains(m_toolchain.cubin_archs, want.arch)) {
        return make_error(ErrorCode::k_invalid_argument, "NVRTC " + m_toolchain.nvrtc_version +
                                                             " (as the toolkit's ptxas) cannot compile for " + want.arch +
                                                             " (kcache capabilities lists the cubin archs)");
      }
    }
    return {};
  }
  for (const ImageRequest& want : images) {
    if (spec.has_ptx_input() && want.kind != ImageKind::cubin) {
      return make_error(ErrorCode::k_invalid_argument,
                        spec.module_count() == 1
                            ? "the input is already PTX; a PTX job emits cubin only (ask for --emit cubin)"
                            : "the job links PTX modules, which nvJitLink links into a cubin; it emits cubin only "
                              "(ask for --emit cubin)");
    }
    if (!contains(m_toolchain.device_archs, want.arch)) {
      return make_error(ErrorCode::k_invalid_argument, "unknown arch '" + want.arch + "': LLVM " +
                                                           m_toolchain.llvm_version + " compiles for " +
                                                           m_toolchain.device_archs.front() + " to " +
                                                           m_toolchain.device_archs.back() +
                                                           " (kcache capabilities lists them)");
    }
    if (want.kind != ImageKind::cubin) continue;
    if (!m_toolchain.cuda_present) {
      return make_error(ErrorCode::k_failed_precondition,
                        "cubin is unavailable: no CUDA toolkit (ptxas) under " + m_toolchain.cuda_root.string() +
                            "; ask for ptx, or start kcached with --cuda-root pointing at a toolkit");
    }
    if (!contains(m_toolchain.cubin_archs, want.arch)) {
      return make_error(ErrorCode::k_invalid_argument, "ptxas (" + m_toolchain.ptxas_version +
                                                           ") cannot make a cubin for " + want.arch +
                                                           "; ask for ptx for this arch instead");
    }
  }
  return {};
}

std::vector<CompileJob> split_by_arch(const CompileJob& job, std::size_t parts) {
  std::vector<std::string> archs;
  for (const ImageRequest& want : job.images) {
    if (!contains(archs, want.arch)) archs.push_back(want.arch);
  }
  parts = std::min(parts, archs.size());
  if (job.spec.side == Side::host || parts < 2) return {job};
  std::vector<CompileJob> out(parts, CompileJob{job.spec, job.modules, {}, job.headers, job.deadline});
  for (const ImageRequest& want : job.images) {
    std::size_t arch_index = static_cast<std::size_t>(std::find(archs.begin(), archs.end(), want.arch) - archs.begin());
    out[arch_index % parts].images.push_back(want);
  }
  return out;
}

Expected<CompileOutput> merge_parts(const CompileJob& job, std::vector<Expected<CompileOutput>> parts) {
  CompileOutput merged;
  for (Expected<CompileOutput>& part : parts) {
    if (!part) return part.error();
  }
  for (const ImageRequest& want : job.images) {
    for (Expected<CompileOutput>& part : parts) {
      auto found = std::find_if(part->images.begin(), part->images.end(),
                                [&](const Image& i) { return i.meta.id() == want; });
      if (found == part->images.end()) continue;
      merged.images.push_back(std::move(*found));
      part->images.erase(found);
      break;
    }
  }
  if (merged.images.size() != job.images.size()) {
    return make_error(ErrorCode::k_internal, "a worker returned " + std::to_string(merged.images.size()) + " of the " +
                                                 std::to_string(job.images.size()) + " images asked of it");
  }
  for (Expected<CompileOutput>& part : parts) {
    for (std::string& d : part->diagnostics) merged.diagnostics.push_back(std::move(d));
  }
  return merged;
}

Expected<CompileOutput> Compiler::compile(const CompileJob& job) const {
  if (auto supported = check_supported(job.spec, job.images); !supported) return supported.error();
  if (job.spec.side == Side::host) return compile_host(m_toolchain, job);
  if (targets_amd(job.spec)) return compile_amdgpu(m_toolchain, job);
  if (job.spec.is_source()) return compile_source(m_toolchain, job);
  return compile_nvptx(m_toolchain, job);
}

}  // namespace kcache::server
