#include "compile/amdgpu_pipeline.hpp"

#include <llvm/IR/CallingConv.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Module.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Transforms/IPO/Internalize.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <algorithm>
#include <map>
#include <set>

#include "compile/lld.hpp"
#include "compile/llvm_common.hpp"
#include "kcache/amd_target.hpp"
#include "kcache/rtlib.hpp"

namespace kcache::server {
namespace {

// AMDGPU's address space for workgroup memory (LDS): where HIP's `extern __shared__` arrays and
// Julia's dynamic shared memory live, sized at launch.
constexpr unsigned k_lds_address_space = 3;

// Code object version: 5, clang 22's default, or the client runtime's cap (4); 6 for generic
// targets, which need it (Compiler::check_supported refuses them under a cap).
int code_object_version(const AmdProcessor& p, const JobSpec& spec) {
  if (p.is_generic()) return 6;
  return spec.amd_code_object_cap != 0 ? std::min(spec.amd_code_object_cap, 5) : 5;
}

llvm::Triple amd_triple() { return llvm::Triple{llvm::StringRef(k_amd_device_triple.data(), k_amd_device_triple.size())}; }

Expected<void> check_amd_module(llvm::Module& m, const CompileJob& job) {
  const llvm::Triple& triple = m.getTargetTriple();
  if (!triple.str().empty() && triple.getArch() != llvm::Triple::amdgcn) {
    return invalid("the module's target triple is '" + triple.str() + "', but the job's archs are AMD GPUs (" +
                   std::string(k_amd_device_triple) + ")" +
                   (triple.isNVPTX() ? ": NVPTX IR compiles for sm archs; an AMD GPU needs IR made for amdgcn"
                                     : ": send host code with side host"));
  }
  return mark_entry_points(m, job.spec.options.entry_points, llvm::CallingConv::AMDGPU_KERNEL);
}

// rtlib's AMDGPU build, only what is used; a runtime function it has no AMD implementation of is
// refused by name rather than left undefined.
Expected<void> link_rtlib(llvm::Module& m, Diagnostics& diags) {
  auto needed = check_runtime_references(m);
  if (!needed) return needed.error();
  if (!*needed) return {};
  std::vector<std::string> missing;
  for (std::string_view name : rtlib::amdgcn_missing()) {
    const llvm::Function* f = m.getFunction(llvm::StringRef(name.data(), name.size()));
    if (f != nullptr && !f->use_empty()) missing.push_back("'" + std::string(name) + "' (" + users_text(*f) + ")");
  }
  if (!missing.empty()) {
    return invalid("rtlib has no AMD GPU implementation of " + join(missing, ", ") +
                   "; these runtime functions exist for NVIDIA GPUs only");
  }
  return link_needed(m, rtlib::amdgcn_bitcode(), "rtlib (amdgcn)", diags);
}

// ROCm's device libraries, in the order they are linked: hip.bc's fences call nothing, ocml's
// functions call ockl's, so ockl comes last. Each is linked only as far as the module uses it, as
// the NVIDIA side links libdevice; clang's HIP toolchain links the same three (and the oclc
// control files, whose constants define_oclc_constants sets instead).
struct DeviceLibrary {
  const char* file;
  const std::string Toolchain::*bitcode;
  bool (*defines)(llvm::StringRef name);  // the functions this library is where to find
};

const DeviceLibrary k_device_libraries[] = {
    {"hip.bc", &Toolchain::hip_bitcode, [](llvm::StringRef n) { return n == "__atomic_work_item_fence"; }},
    {"ocml.bc", &Toolchain::ocml_bitcode, [](llvm::StringRef n) { return n.starts_with("__ocml_"); }},
    {"ockl.bc", &Toolchain::ockl_bitcode, [](llvm::StringRef n) { return n.starts_with("__ockl_"); }},
};

// The functions the module calls that `library` defines.
std::vector<std::string> calls_into(const llvm::Module& m, const DeviceLibrary& library) {
  std::vector<std::string> used;
  for (const llvm::Function& f : m) {
    if (f.isDeclaration() && !f.use_empty() && library.defines(f.getName())) used.push_back(f.getName().str());
  }
  return used;
}

// hip.bc, ocml and ockl, each only as far as the module uses it.
Expected<void> link_amd_device_libraries(llvm::Module& m, const Toolchain& toolchain, Diagnostics& diags) {
  for (const DeviceLibrary& library : k_device_libraries) {
    std::vector<std::string> used = calls_into(m, library);
    if (used.empty()) continue;
    const std::string& bitcode = toolchain.*library.bitcode;
    if (toolchain.rocm_device_libs.empty() || bitcode.empty()) {
      std::string where = toolchain.rocm_device_libs.empty() ? std::string("this kcached found no ROCm device libraries")
                                                            : "there is none in " + toolchain.rocm_device_libs.string();
      return make_error(ErrorCode::k_failed_precondition,
                        "the module calls " + join_capped(used, 300) + ", which ROCm's " + library.file +
                            " defines, but " + where + " (install Debian's rocm-device-libs)");
    }
    if (auto linked = link_needed(m, bitcode, library.file, diags); !linked) return linked;
  }
  return {};
}

bool is_oclc_constant(llvm::StringRef name) { return name.starts_with("__oclc_"); }

// What a module's own functions say they were made for: clang writes "target-cpu" and
// "target-features" (with the wave size) on every function. Read before any library is linked
// and before retarget_functions drops them.
struct MadeFor {
  std::string cpu;  // "gfx90a"; empty when the module does not say (hand-written IR, Julia)
  int wave = 0;     // 32 or 64 when its features name a wave size; else 0
};

MadeFor made_for(const llvm::Module& m) {
  MadeFor made;
  for (const llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    if (made.cpu.empty()) made.cpu = f.getFnAttribute("target-cpu").getValueAsString().str();
    llvm::StringRef features = f.getFnAttribute("target-features").getValueAsString();
    if (made.wave == 0 && features.contains("+wavefrontsize64")) made.wave = 64;
    if (made.wave == 0 && features.contains("+wavefrontsize32")) made.wave = 32;
  }
  return made;
}

// Bitcode made for one gfx and compiled for another (the rule, docs/pipelines.md, "AMD"):
// - it is retargeted: the job's target decides the ISA, as for hand-written IR;
// - its wave size is kept, since HIP folds warpSize into the code (HIP 5.2: a constant).
//   Wave64 code asked for an RDNA target (gfx10 and newer, which run either) compiles in
//   wave64 mode, as it was written; wave32 code asked for a gfx9 target (waves of 64 only) is
//   refused, since every shuffle, ballot and warp-sized loop would change meaning;
// - an instruction family the target does not have (matrix cores, dot products) is refused by
//   name before LLVM meets it (LLVM stops with "Cannot select" instead).
struct InstructionFamily {
  const char* prefix;   // of the intrinsics' names
  const char* feature;  // the LLVM subtarget feature they need
  const char* what;     // for a person
};

constexpr InstructionFamily k_instruction_families[] = {
    {"llvm.amdgcn.mfma.", "mai-insts", "MFMA matrix-core instructions (CDNA: gfx908, gfx90a, gfx94x, gfx950)"},
    {"llvm.amdgcn.smfmac.", "mai-insts", "sparse MFMA instructions (CDNA 3: gfx94x, gfx950)"},
    {"llvm.amdgcn.wmma.", "gfx11-insts", "WMMA matrix instructions (RDNA 3 and 4: gfx11, gfx12)"},
    {"llvm.amdgcn.swmmac.", "gfx12-insts", "sparse WMMA instructions (RDNA 4: gfx12)"},
    {"llvm.amdgcn.sdot4", "dot1-insts", "v_dot4_i32_i8 (dot1-insts)"},
    {"llvm.amdgcn.udot4", "dot7-insts", "v_dot4_u32_u8 (dot7-insts)"},
    {"llvm.amdgcn.sdot8", "dot1-insts", "v_dot8_i32_i4 (dot1-insts)"},
    {"llvm.amdgcn.udot8", "dot7-insts", "v_dot8_u32_u4 (dot7-insts)"},
};

Expected<void> check_target_can_run(const llvm::Module& m, const MadeFor& made, const AmdTarget& target,
                                    const llvm::TargetMachine& tm) {
  std::string made_text = made.cpu.empty() ? std::string() : " (the module was made for " + made.cpu + ")";
  if (made.wave == 32 && !target.processor->wave32) {
    return invalid("the module was made for waves of 32" + made_text + ", and " + target.str() +
                   " runs waves of 64 only: its shuffles, ballots and warpSize would change meaning. Compile "
                   "the source for " + target.str());
  }
  const llvm::MCSubtargetInfo* sti = tm.getMCSubtargetInfo();
  for (const llvm::Function& f : m) {
    if (!f.isIntrinsic() || f.use_empty()) continue;
    for (const InstructionFamily& family : k_instruction_families) {
      if (!f.getName().starts_with(family.prefix) || sti->checkFeatures(std::string("+") + family.feature)) continue;
      return invalid("'" + f.getName().str() + "' (" + users_text(f) + ") is one of the " + family.what + ", which " +
                     target.str() + " does not have" + made_text +
                     ". Compile for an arch that has them, or guard the code by arch in the source");
    }
  }
  return {};
}

// The LLVM features for `target` and a module made for waves of `made.wave`.
std::string codegen_features(const AmdTarget& target, const MadeFor& made) {
  std::string features = target.llvm_features();
  if (made.wave == 64 && target.processor->wave32) features += std::string(features.empty() ? "" : ",") + "+wavefrontsize64";
  return features;
}

// After linking, only LLVM intrinsics, workgroup (LDS) arrays sized at launch and the oclc
// control constants (defined per target below) may stay undefined: an HSA code object has no
// later link.
Expected<void> check_undefined(const llvm::Module& m) {
  std::vector<std::string> undefined;
  for (const llvm::GlobalValue& gv : m.global_values()) {
    if (!gv.isDeclaration() || gv.getName().starts_with("llvm.")) continue;
    if (const auto* f = llvm::dyn_cast<llvm::Function>(&gv); f != nullptr && (f->isIntrinsic() || f->use_empty())) continue;
    if (llvm::isa<llvm::GlobalVariable>(gv) &&
        (gv.getAddressSpace() == k_lds_address_space || is_oclc_constant(gv.getName()) || gv.use_empty())) {
      continue;
    }
    undefined.push_back("'" + gv.getName().str() + "' (" + users_text(gv) + ")");
  }
  if (undefined.empty()) return {};
  return invalid("undefined on the AMD GPU: " + join_capped(undefined, 900) +
                 ". Nothing supplies these: neither rtlib nor ROCm's device libraries (hip, ocml, ockl) define them; "
                 "define them in the module");
}

// The oclc control constants ROCm's device libraries read, for this target and these options
// (what the oclc_*.bc files would define; Debian's 5.2 set lacks newer ISAs, so they are made here).
Expected<void> define_oclc_constants(llvm::Module& m, const AmdProcessor& p, const MadeFor& made, const JobSpec& spec) {
  const CompileOptions& options = spec.options;
  bool fast = options.fast_math;
  struct Constant {
    const char* name;
    std::uint64_t value;
  };
  const Constant constants[] = {
      {"__oclc_ISA_version", static_cast<std::uint64_t>(p.oclc_isa_version())},
      {"__oclc_ABI_version", static_cast<std::uint64_t>(code_object_version(p, spec) * 100)},
      {"__oclc_wavefrontsize64", p.wave32 && made.wave != 64 ? 0u : 1u},
      {"__oclc_finite_only_opt", fast ? 1u : 0u},
      {"__oclc_unsafe_math_opt", fast ? 1u : 0u},
      {"__oclc_daz_opt", fast ? 1u : 0u},
      {"__oclc_correctly_rounded_sqrt32", fast ? 0u : 1u},
  };
  for (const Constant& c : constants) {
    llvm::GlobalVariable* gv = m.getNamedGlobal(c.name);
    if (gv == nullptr || !gv->isDeclaration()) continue;
    if (!gv->getValueType()->isIntegerTy()) return invalid(std::string(c.name) + " is declared with a non-integer type");
    gv->setInitializer(llvm::ConstantInt::get(gv->getValueType(), c.value));
    gv->setConstant(true);
    gv->setLinkage(llvm::GlobalValue::InternalLinkage);
  }
  for (const llvm::GlobalVariable& gv : m.globals()) {
    if (gv.isDeclaration() && is_oclc_constant(gv.getName()) && !gv.use_empty()) {
      return invalid("'" + gv.getName().str() + "' (" + users_text(gv) +
                     ") is not an oclc control constant kcache knows; it sets " + join([&] {
                       std::vector<std::string> names;
                       for (const Constant& c : constants) names.emplace_back(c.name);
                       return names;
                     }(), ", "));
    }
  }
  return {};
}

struct ArchOutput {
  std::string hsaco;
  std::string assembly;
};

Expected<ArchOutput> compile_for(const llvm::Module& source, const MadeFor& made, const Toolchain& toolchain,
                                 const CompileJob& job, const AmdTarget& target, bool want_hsaco, bool want_assembly,
                                 Diagnostics& diags) {
  auto tm = make_target_machine(amd_triple(), std::string(target.processor->name), codegen_features(target, made),
                                llvm::Reloc::PIC_, job.spec.options.opt_level);
  if (!tm) return tm.error();
  if (auto runs = check_target_can_run(source, made, target, **tm); !runs) return runs.error();
  std::unique_ptr<llvm::Module> m = llvm::CloneModule(source);
  if (auto defined = define_oclc_constants(*m, *target.processor, made, job.spec); !defined) return defined.error();
  m->setModuleFlag(llvm::Module::Error, "amdhsa_code_object_version",
                   llvm::ConstantInt::get(llvm::Type::getInt32Ty(m->getContext()), code_object_version(*target.processor, job.spec) * 100));
  m->setDataLayout((*tm)->createDataLayout());
  optimize(*m, **tm, job.spec.options.opt_level);
  ArchOutput out;
  if (want_assembly) {
    std::unique_ptr<llvm::Module> copy = want_hsaco ? llvm::CloneModule(*m) : std::move(m);
    auto assembly = emit(*copy, **tm, llvm::CodeGenFileType::AssemblyFile, diags, target.str());
    if (!assembly) return assembly.error();
    out.assembly = std::move(*assembly);
    if (!want_hsaco) return out;
  }
  auto object = emit(*m, **tm, llvm::CodeGenFileType::ObjectFile, diags, target.str());
  if (!object) return object.error();
  auto hsaco = link_hsaco(toolchain, *object, target.str(), job.deadline);
  if (!hsaco) return hsaco.error();
  out.hsaco = std::move(*hsaco);
  return out;
}

}  // namespace

Expected<CompileOutput> compile_amdgpu(const Toolchain& toolchain, const CompileJob& job) {
  std::vector<ModuleSource> ir;
  for (std::size_t i = 0; i < job.modules.size(); ++i) {
    InputFormat format = i == 0 ? job.spec.format : job.spec.linked_formats.at(i - 1);
    std::string name = i == 0 ? "the module" : "linked module " + std::to_string(i + 1);
    if (job.modules[i].empty()) return invalid(name + " is empty: send LLVM bitcode or text IR for amdgcn");
    ir.push_back({format, job.modules[i], name});
  }
  auto loaded = load_and_link(ir);
  if (!loaded) return loaded.error();
  llvm::Module& module = *(*loaded)->module;
  Diagnostics& diags = (*loaded)->diags;
  if (auto checked = check_amd_module(module, job); !checked) return checked.error();
  const MadeFor made = made_for(module);

  // One data layout for every AMD target: set before linking, which copies it to the libraries.
  auto layout = make_target_machine(amd_triple(), "", "", llvm::Reloc::PIC_, 0);
  if (!layout) return layout.error();
  module.setTargetTriple(amd_triple());
  module.setDataLayout((*layout)->createDataLayout());
  if (auto linked = link_rtlib(module, diags); !linked) return linked.error();
  if (auto linked = link_amd_device_libraries(module, toolchain, diags); !linked) return linked.error();
  if (auto defined = check_undefined(module); !defined) return defined.error();

  std::set<std::string> kernels;
  for (const llvm::Function& f : module) {
    if (f.getCallingConv() == llvm::CallingConv::AMDGPU_KERNEL && !f.isDeclaration()) kernels.insert(f.getName().str());
  }
  // Kernels and device variables (a host loader reads them by name: rtlib's exception record)
  // stay visible; everything else becomes internal, for the optimiser and the code object.
  llvm::internalizeModule(module, [&](const llvm::GlobalValue& gv) {
    if (llvm::isa<llvm::GlobalVariable>(gv)) return !is_oclc_constant(gv.getName()) && !gv.hasLocalLinkage();
    return kernels.contains(gv.getName().str());
  });
  retarget_functions(module);
  apply_debug_options(module, job.spec.options);
  if (job.spec.options.fast_math) apply_fast_math(module);

  CompileOutput out;
  std::map<std::string, ArchOutput> by_arch;
  for (const ImageRequest& want : job.images) {
    auto compiled = by_arch.find(want.arch);
    if (compiled == by_arch.end()) {
      auto target = parse_amd_target(want.arch);
      if (!target) return target.error();
      auto wants = [&](ImageKind kind) {
        return std::any_of(job.images.begin(), job.images.end(),
                           [&](const ImageRequest& r) { return r.arch == want.arch && r.kind == kind; });
      };
      auto output = compile_for(module, made, toolchain, job, *target, wants(ImageKind::hsaco), wants(ImageKind::amdgcn),
                                diags);
      if (!output) return output.error();
      compiled = by_arch.emplace(want.arch, std::move(*output)).first;
    }
    if (want.kind == ImageKind::amdgcn) {
      out.images.push_back(make_image(want, compiled->second.assembly));
      continue;
    }
    auto info = hsaco_kernels(compiled->second.hsaco);
    if (!info) return info.error();
    out.images.push_back(make_image(want, compiled->second.hsaco, std::move(*info)));
  }
  out.diagnostics.insert(out.diagnostics.begin(), diags.warnings.begin(), diags.warnings.end());
  return out;
}

}  // namespace kcache::server
