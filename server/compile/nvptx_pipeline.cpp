#include "compile/nvptx_pipeline.hpp"

#include <llvm/ADT/STLExtras.h>
#include <llvm/ADT/StringExtras.h>
#include <llvm/IR/CallingConv.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Linker/Linker.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Transforms/IPO/Internalize.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>
#include <variant>

#include "compile/cubin.hpp"
#include "compile/device_symbols.hpp"
#include "compile/llvm_common.hpp"
#include "kcache/rtlib.hpp"

namespace kcache::server {
namespace {

// Kernels marked the old way, with !nvvm.annotations = !{ptr @f, !"kernel", i32 1}.
std::set<std::string> annotated_kernels(const llvm::Module& m) {
  std::set<std::string> out;
  const llvm::NamedMDNode* annotations = m.getNamedMetadata("nvvm.annotations");
  if (annotations == nullptr) return out;
  for (const llvm::MDNode* node : annotations->operands()) {
    if (node->getNumOperands() < 3) continue;
    auto* fn = llvm::mdconst::dyn_extract_or_null<llvm::Function>(node->getOperand(0));
    auto* kind = llvm::dyn_cast_or_null<llvm::MDString>(node->getOperand(1));
    if (fn != nullptr && kind != nullptr && kind->getString() == "kernel") out.insert(fn->getName().str());
  }
  return out;
}

// Checks the module against the job before any codegen: triple, entry points.
Expected<void> check_nvptx_module(llvm::Module& m, const CompileJob& job) {
  const llvm::Triple& triple = m.getTargetTriple();
  if (!triple.str().empty() && triple.getArch() != llvm::Triple::nvptx64) {
    return invalid("the module's target triple is '" + triple.str() + "', but this is a device job for " +
                   std::string(k_device_triple) + ": send host code with side host, or compile for the device");
  }
  return mark_entry_points(m, job.spec.options.entry_points, llvm::CallingConv::PTX_Kernel);
}

// Every kernel of the module: ptx_kernel calling convention or !nvvm.annotations.
std::set<std::string> kernel_names(const llvm::Module& m) {
  std::set<std::string> out = annotated_kernels(m);
  for (const llvm::Function& f : m) {
    if (f.getCallingConv() == llvm::CallingConv::PTX_Kernel) out.insert(f.getName().str());
  }
  return out;
}

bool uses_libdevice(const llvm::Module& m) {
  for (const llvm::Function& f : m) {
    if (f.isDeclaration() && f.getName().starts_with("__nv_") && !f.use_empty()) return true;
  }
  return false;
}

// Links rtlib and libdevice as needed, checks what is left, and internalizes: only kernels,
// device variables (host code reads them by name) and what the job's PTX modules call stay
// visible.
Expected<void> link_nvptx_device_libraries(llvm::Module& m, const Toolchain& toolchain, const CompileJob& job,
                                           const PtxSymbols& ptx_modules, Diagnostics& diags) {
  auto needs_rtlib = check_runtime_references(m);
  if (!needs_rtlib) return needs_rtlib.error();
  m.setTargetTriple(llvm::Triple{llvm::StringRef(k_device_triple.data(), k_device_triple.size())});
  if (*needs_rtlib) {
    if (auto linked = link_needed(m, rtlib::device_bitcode(), "rtlib.bc", diags); !linked) return linked.error();
  }
  if (uses_libdevice(m)) {
    if (toolchain.libdevice.empty()) {
      return make_error(ErrorCode::k_failed_precondition,
                        "the module calls libdevice functions (__nv_*) but libdevice is not installed at " +
                            (toolchain.cuda_root / "nvvm/libdevice/libdevice.10.bc").string() +
                            "; install the CUDA toolkit there or start kcached with --cuda-root");
    }
    if (m.getModuleFlag("nvvm-reflect-ftz") == nullptr) {
      m.addModuleFlag(llvm::Module::Override, "nvvm-reflect-ftz", job.spec.options.fast_math ? 1 : 0);
    }
    if (auto linked = link_needed(m, toolchain.libdevice_bitcode, "libdevice.10.bc", diags); !linked) {
      return linked.error();
    }
  }
  if (auto defined = check_undefined_symbols(m, ptx_modules.defined); !defined) return defined.error();
  std::set<std::string> kernels = kernel_names(m);
  llvm::internalizeModule(m, [&](const llvm::GlobalValue& gv) {
    return llvm::isa<llvm::GlobalVariable>(gv) || kernels.contains(gv.getName().str()) ||
           ptx_modules.external.contains(gv.getName().str());
  });
  // NVPTX renames internal symbols into PTX's identifier set but stops (a fatal error, found by
  // fuzz/module_fuzzer) on a visible one outside it.
  std::vector<std::string> bad;
  for (const llvm::GlobalValue& gv : m.global_values()) {
    if (gv.hasLocalLinkage() || (gv.isDeclaration() && gv.use_empty())) continue;
    llvm::StringRef name = gv.getName();
    if (name.starts_with("llvm.")) continue;  // intrinsics (unknown ones failed above) and llvm.used & co.
    bool ok = !name.empty() && !llvm::isDigit(name.front()) && llvm::all_of(name, [](char c) {
      return llvm::isAlnum(c) || c == '_' || c == '$';
    });
    if (!ok) bad.push_back("'" + llvm::Twine(name).str() + "'");
  }
  if (!bad.empty()) {
    return invalid("kernel and device-variable names must be PTX identifiers (letters, digits, _ and $, not starting "
                   "with a digit): " + join(bad, ", "));
  }
  return {};
}

// The highest PTX ISA a module's functions ask for through "target-features" (+ptxNN), which
// inline asm from CUDA headers needs; 0 when none.
int requested_ptx_version(const llvm::Module& m) {
  static const std::regex ptx(R"(\+ptx([0-9]+))");
  int best = 0;
  for (const llvm::Function& f : m) {
    llvm::Attribute a = f.getFnAttribute("target-features");
    if (!a.isValid()) continue;
    std::string features = a.getValueAsString().str();
    for (auto it = std::sregex_iterator(features.begin(), features.end(), ptx); it != std::sregex_iterator(); ++it) {
      best = std::max(best, std::stoi((*it)[1]));
    }
  }
  return best;
}

// The PTX ISA LLVM picks for `arch` when asked for none: the oldest that supports it. Read from
// the `.version` of an empty module's PTX, so it always agrees with the LLVM linked in.
Expected<int> min_ptx_version(const llvm::Triple& triple, const std::string& arch) {
  static std::mutex mutex;
  static std::map<std::string, int> known;
  std::lock_guard lock(mutex);
  if (auto it = known.find(arch); it != known.end()) return it->second;
  auto tm = make_target_machine(triple, arch, "", std::nullopt, 0);
  if (!tm) return tm.error();
  llvm::LLVMContext context;
  llvm::Module empty("empty", context);
  empty.setTargetTriple(triple);
  empty.setDataLayout((*tm)->createDataLayout());
  auto ptx = emit(empty, **tm, llvm::CodeGenFileType::AssemblyFile, Diagnostics{}, arch);
  if (!ptx) return ptx.error();
  static const std::regex version(R"(\.version\s+([0-9]+)\.([0-9]))");
  std::smatch m;
  if (!std::regex_search(*ptx, m, version)) {
    return make_error(ErrorCode::k_internal, "LLVM wrote no .version directive for " + arch);
  }
  return known[arch] = std::stoi(m[1]) * 10 + std::stoi(m[2]);
}

Expected<std::string> emit_ptx(const llvm::Module& source, const CompileJob& job, const std::string& arch,
                               int ptx_version, Diagnostics& diags) {
  std::unique_ptr<llvm::Module> m = llvm::CloneModule(source);
  llvm::Triple triple{llvm::StringRef(k_device_triple.data(), k_device_triple.size())};
  m->setTargetTriple(triple);
  // A module's +ptxNN asks for "at least NN"; below the arch's minimum LLVM would stop with a
  // fatal error (found by fuzz/module_fuzzer), so the arch's own minimum satisfies it.
  if (ptx_version > 0) {
    auto floor = min_ptx_version(triple, arch);
    if (!floor) return floor.error();
    if (job.spec.ptx_isa_cap > 0 && *floor > job.spec.ptx_isa_cap) {
      return make_error(ErrorCode::k_failed_precondition,
                        arch + " needs PTX ISA " + ptx_isa_name(*floor) + " or newer; the client's driver JITs up to " +
                            ptx_isa_name(job.spec.ptx_isa_cap) + ": update the driver, or drop " + arch);
    }
    if (ptx_version < *floor) ptx_version = 0;
  }
  std::string features = ptx_version > 0 ? "+ptx" + std::to_string(ptx_version) : "";
  auto tm = make_target_machine(triple, arch, features, std::nullopt, job.spec.options.opt_level);
  if (!tm) return tm.error();
  m->setDataLayout((*tm)->createDataLayout());
  optimize(*m, **tm, job.spec.options.opt_level);
  return emit(*m, **tm, llvm::CodeGenFileType::AssemblyFile, diags, arch);
}

// PTX emitted below the ISA its module asked for (an older client driver) may hold inline asm
// that needs the newer ISA. ptxas, where the toolkit has it, finds out before the driver would.
Expected<void> check_capped_ptx(const Toolchain& toolchain, const CompileJob& job, std::string_view ptx,
                                const std::string& arch, int requested_ptx) {
  if (job.spec.ptx_isa_cap == 0 || requested_ptx <= job.spec.ptx_isa_cap || !toolchain.cuda_present) return {};
  std::vector<std::string> ignored;
  auto assembled = assemble_cubin(toolchain, job, {ptx}, arch, false, ignored);
  if (assembled) return {};
  return make_error(ErrorCode::k_failed_precondition,
                    "the module asks for PTX ISA " + ptx_isa_name(requested_ptx) + " and does not assemble at " +
                        ptx_isa_name(job.spec.ptx_isa_cap) + ", the newest the client's driver JITs: update the driver. " +
                        "ptxas: " + assembled.error().message.substr(0, 600));
}

}  // namespace

Expected<CompileOutput> compile_nvptx(const Toolchain& toolchain, const CompileJob& job) {
  // IR modules are linked by LLVM into one; PTX modules join them at the cubin link (nvJitLink).
  std::vector<ModuleSource> ir;
  std::vector<std::string_view> user_ptx;
  PtxSymbols ptx_modules;
  for (std::size_t i = 0; i < job.modules.size(); ++i) {
    InputFormat format = i == 0 ? job.spec.format : job.spec.linked_formats.at(i - 1);
    std::string name = i == 0 ? "the module" : "linked module " + std::to_string(i + 1);
    if (job.modules[i].empty()) return invalid(name + " is empty: send LLVM bitcode, LLVM text IR or PTX");
    if (format != InputFormat::ptx) {
      ir.push_back({format, job.modules[i], name});
      continue;
    }
    user_ptx.push_back(job.modules[i]);
    PtxSymbols symbols = ptx_symbols(job.modules[i]);
    ptx_modules.defined.merge(symbols.defined);
    ptx_modules.external.merge(symbols.external);
  }
  CompileOutput out;
  if (ir.empty()) {  // PTX only: assemble (and link) it for each arch
    for (const ImageRequest& want : job.images) {
      auto image = assemble_cubin(toolchain, job, user_ptx, want.arch, true, out.diagnostics);
      if (!image) return image.error();
      out.images.push_back(std::move(*image));
    }
    return out;
  }

  auto loaded = load_and_link(ir);
  if (!loaded) return loaded.error();
  llvm::Module& module = *(*loaded)->module;
  Diagnostics& diags = (*loaded)->diags;
  if (auto checked = check_nvptx_module(module, job); !checked) return checked.error();

  // The newest PTX ISA both LLVM and ptxas take, never older than the module asks for (inline
  // asm from CUDA headers needs it). Read before rtlib, whose clang tags would count too.
  int requested_ptx = requested_ptx_version(module);
  int ptx_version = std::max(requested_ptx, toolchain.max_ptx_version);
  // For an older driver, its newest ISA. Clang asks for the newest ISA it knows whether or not
  // the code needs it, so a module asking for more is tried at the cap and checked below.
  if (job.spec.ptx_isa_cap > 0) ptx_version = job.spec.ptx_isa_cap;
  if (auto linked = link_nvptx_device_libraries(module, toolchain, job, ptx_modules, diags); !linked)
    return linked.error();
  retarget_functions(module);
  apply_debug_options(module, job.spec.options);
  if (job.spec.options.fast_math) apply_fast_math(module);

  // One PTX per arch, shared by that arch's ptx and cubin images. LLVM makes them one arch after
  // another (one module, one thread); each arch's cubin is assembled on a thread of its own while
  // LLVM goes on to the next arch, as many at once as the job was lent CPUs (at least one).
  struct Assembly {
    std::future<Expected<Image>> image;
    std::vector<std::string> diagnostics;
  };
  std::map<std::string, std::string> ptx_by_arch;
  std::vector<std::unique_ptr<Assembly>> assemblies;  // one per cubin image, in image order
  std::vector<std::variant<Image, Assembly*>> images;  // one per job image, in order
  const std::size_t in_flight = std::max<std::size_t>(1, job.cpus.size());
  for (const ImageRequest& want : job.images) {
    auto ptx = ptx_by_arch.find(want.arch);
    if (ptx == ptx_by_arch.end()) {
      auto emitted = emit_ptx(module, job, want.arch, ptx_version, diags);
      if (!emitted) return emitted.error();
      if (auto fits = check_capped_ptx(toolchain, job, *emitted, want.arch, requested_ptx); !fits) return fits.error();
      ptx = ptx_by_arch.emplace(want.arch, std::move(*emitted)).first;
    }
    if (want.kind == ImageKind::ptx) {
      images.emplace_back(make_image(want, ptx->second, ptx_entries(ptx->second)));
      continue;
    }
    if (assemblies.size() >= in_flight) assemblies[assemblies.size() - in_flight]->image.wait();
    auto& a = assemblies.emplace_back(std::make_unique<Assembly>());
    std::vector<std::string_view> link = {ptx->second};
    link.insert(link.end(), user_ptx.begin(), user_ptx.end());
    a->image = std::async(std::launch::async, [&toolchain, &job, link, arch = want.arch, diagnostics = &a->diagnostics] {
      return assemble_cubin(toolchain, job, link, arch, false, *diagnostics);
    });
    images.emplace_back(a.get());
  }
  // In image order: the first failure is the job's, and diagnostics keep their order.
  for (auto& image : images) {
    if (auto* made = std::get_if<Image>(&image)) {
      out.images.push_back(std::move(*made));
      continue;
    }
    Assembly* a = std::get<Assembly*>(image);
    auto cubin = a->image.get();
    if (!cubin) {
      for (auto& rest : assemblies) {
        if (rest->image.valid()) rest->image.wait();  // none outlives the PTX it reads
      }
      return cubin.error();
    }
    out.images.push_back(std::move(*cubin));
    out.diagnostics.insert(out.diagnostics.end(), a->diagnostics.begin(), a->diagnostics.end());
  }
  out.diagnostics.insert(out.diagnostics.begin(), diags.warnings.begin(), diags.warnings.end());
  return out;
}

}  // namespace kcache::server
