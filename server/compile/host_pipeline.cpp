#include "compile/host_pipeline.hpp"

#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/TargetParser/Triple.h>

#include "compile/guard.hpp"
#include "compile/llvm_common.hpp"

namespace kcache::server {
namespace {

bool is_gpu_arch(const llvm::Triple& t) {
  return t.isNVPTX() || t.isAMDGPU() || t.isSPIRV();
}

Expected<void> check_triple(const llvm::Module& m, const llvm::Triple& target) {
  const llvm::Triple& module = m.getTargetTriple();
  if (module.str().empty()) return {};
  if (is_gpu_arch(module)) {
    return invalid("the module's target triple is '" + module.str() +
                   "', a GPU triple: this is a device module, send it with side device");
  }
  if (module.getArch() != target.getArch()) {
    return invalid("the module's target triple is '" + module.str() + "' but the job targets '" + target.str() +
                   "': set the job's target to the module's triple, or compile the module for " + target.str());
  }
  return {};
}

}  // namespace

Expected<CompileOutput> compile_host(const Toolchain& toolchain, const CompileJob& job) {
  const CompileOptions& options = job.spec.options;
  auto loaded = load_module(job.spec.format, job.modules.at(0));
  if (!loaded) return loaded.error();
  llvm::Module& module = *(*loaded)->module;
  Diagnostics& diags = (*loaded)->diags;
  llvm::Triple triple(job.spec.target);
  if (auto ok = check_triple(module, triple); !ok) return ok.error();

  // The guard runs before anything else touches the module: host codegen of an NVVM intrinsic
  // would abort LLVM, and a gpu_* reference would reach the object.
  std::vector<std::string> stubbed;
  if (auto findings = find_device_only(module); !findings.empty()) {
    if (options.guard == HostGuard::reject) return guard_rejection(findings);
    auto stubs = stub_device_only(module, findings);
    if (!stubs) return stubs.error();
    stubbed = std::move(*stubs);
  }

  // Position-independent, so the object links into Debian's default PIE executables and into
  // shared libraries.
  auto tm = make_target_machine(triple, options.cpu, "", llvm::Reloc::PIC_, options.opt_level);
  if (!tm) return tm.error();
  if (!options.cpu.empty() && !(*tm)->getMCSubtargetInfo()->isCPUStringValid(options.cpu)) {
    return invalid("unknown CPU '" + options.cpu + "' for " + triple.str() + " (LLVM names such as x86-64-v3, znver4)");
  }
  module.setTargetTriple(triple);
  module.setDataLayout((*tm)->createDataLayout());
  apply_debug_options(module, options);
  if (options.fast_math) apply_fast_math(module);
  optimize(module, **tm, options.opt_level);
  auto object = emit(module, **tm, llvm::CodeGenFileType::ObjectFile, diags, triple.str());
  if (!object) return object.error();

  CompileOutput out;
  Image image = make_image(job.images.at(0), std::move(*object));
  image.meta.stubbed = stubbed;
  out.images.push_back(std::move(image));
  out.diagnostics = diags.warnings;
  for (const std::string& s : stubbed) out.diagnostics.push_back("stubbed device-only reference: " + s);
  return out;
}

}  // namespace kcache::server
