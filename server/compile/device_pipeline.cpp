#include "compile/device_pipeline.hpp"

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
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include "compile/llvm_common.hpp"
#include "compile/process.hpp"
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
Expected<void> check_module(llvm::Module& m, const CompileJob& job) {
  const llvm::Triple& triple = m.getTargetTriple();
  if (!triple.str().empty() && triple.getArch() != llvm::Triple::nvptx64) {
    return invalid("the module's target triple is '" + triple.str() + "', but this is a device job for " +
                   std::string(k_device_triple) + ": send host code with side host, or compile for the device");
  }
  for (const std::string& name : job.spec.options.entry_points) {
    llvm::Function* f = m.getFunction(name);
    if (f == nullptr || f->isDeclaration()) {
      std::vector<std::string> defined;
      for (const llvm::Function& g : m) {
        if (!g.isDeclaration()) defined.push_back(g.getName().str());
      }
      return invalid("entry point '" + name + "' is not defined in the module (defined functions: " +
                     (defined.empty() ? std::string("none") : join(defined, ", ")) + ")");
    }
    if (!f->getReturnType()->isVoidTy()) {
      return invalid("entry point '" + name + "' returns a value; GPU kernels return void");
    }
    f->setCallingConv(llvm::CallingConv::PTX_Kernel);
    f->setLinkage(llvm::GlobalValue::ExternalLinkage);
  }
  return {};
}


// Every kernel of the module: ptx_kernel calling convention or !nvvm.annotations.
std::set<std::string> kernel_names(const llvm::Module& m) {
  std::set<std::string> out = annotated_kernels(m);
  for (const llvm::Function& f : m) {
    if (f.getCallingConv() == llvm::CallingConv::PTX_Kernel) out.insert(f.getName().str());
  }
  return out;
}

std::string users_text(const llvm::GlobalValue& gv) {
  auto users = users_of(gv);
  return users.empty() ? "unused" : "used by " + join(users, ", ");
}

const rtlib::RuntimeFunction* runtime_function(std::string_view name) {
  for (const rtlib::RuntimeFunction& f : rtlib::runtime_functions()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// Checks every reference to a runtime function against the manifest, before linking: GPUCompiler
// said only "Invalid return type for runtime function 'box_bool'"; this says which declaration,
// what rtlib expects, and who made the call. Returns whether rtlib is needed.
Expected<bool> check_runtime_references(const llvm::Module& m) {
  bool needed = false;
  for (const llvm::Function& f : m) {
    std::string name = f.getName().str();
    if (!name.starts_with("gpu_")) continue;
    const rtlib::RuntimeFunction* rf = runtime_function(name);
    if (rf == nullptr) {
      std::vector<std::string> known;
      for (const auto& r : rtlib::runtime_functions()) known.emplace_back(r.name);
      return invalid("'" + name + "' (" + users_text(f) +
                     ") uses the reserved gpu_ prefix but is not an rtlib function; rtlib provides " + join(known, ", "));
    }
    if (!f.isDeclaration()) {
      return invalid("the module defines '" + name + "', which rtlib provides (" + std::string(rf->meaning) +
                     "); declare it instead of defining it");
    }
    std::string found;
    llvm::raw_string_ostream os(found);
    f.getFunctionType()->print(os);
    os.flush();
    if (found != rf->signature) {
      return invalid("runtime function '" + name + "' is declared as '" + found + "', but rtlib defines it as '" +
                     std::string(rf->signature) + "' (" + std::string(rf->meaning) + "); " + users_text(f) +
                     ". Declare it as rtlib/manifest.def says.");
    }
    needed = needed || !f.use_empty();
  }
  return needed;
}

// Calls into the CUDA device runtime (dynamic parallelism: kernels launching kernels), which
// libcudadevrt.a provides at link time.
bool is_device_runtime_function(llvm::StringRef name) {
  return name.starts_with("__cudaCDP2") || name.starts_with("cuda");
}

bool uses_device_runtime(const llvm::Module& m) {
  for (const llvm::Function& f : m) {
    if (f.isDeclaration() && is_device_runtime_function(f.getName()) && !f.use_empty()) return true;
  }
  return false;
}

bool uses_libdevice(const llvm::Module& m) {
  for (const llvm::Function& f : m) {
    if (f.isDeclaration() && f.getName().starts_with("__nv_") && !f.use_empty()) return true;
  }
  return false;
}

// Links `bitcode` into `m`, taking only the definitions `m` uses.
Expected<void> link_needed(llvm::Module& m, std::string_view bitcode, const std::string& what, Diagnostics& diags) {
  llvm::MemoryBufferRef buffer(llvm::StringRef(bitcode.data(), bitcode.size()), what);
  auto library = llvm::parseBitcodeFile(buffer, m.getContext());
  if (!library) {
    return make_error(ErrorCode::k_internal, "cannot read " + what + ": " + llvm::toString(library.takeError()));
  }
  (*library)->setTargetTriple(m.getTargetTriple());
  (*library)->setDataLayout(m.getDataLayout());
  if (llvm::Linker::linkModules(m, std::move(*library), llvm::Linker::Flags::LinkOnlyNeeded)) {
    return make_error(ErrorCode::k_internal, "linking " + what + " failed: " + join(diags.errors, "; "));
  }
  return {};
}

// What is still undefined after linking must come from the driver, or the module cannot load.
Expected<void> check_undefined(const llvm::Module& m) {
  std::vector<std::string> undefined;
  for (const llvm::GlobalValue& gv : m.global_values()) {
    if (!gv.isDeclaration() || gv.use_empty() || llvm::isa<llvm::GlobalAlias>(gv)) continue;
    // A real intrinsic, not merely an llvm.* name: an unknown one would reach codegen as a call.
    if (const auto* f = llvm::dyn_cast<llvm::Function>(&gv);
        f != nullptr && f->getIntrinsicID() != llvm::Intrinsic::not_intrinsic) {
      continue;
    }
    if (rtlib::is_driver_provided(gv.getName())) continue;
    if (gv.getName() == "__nvvm_reflect") continue;  // libdevice's query, answered by the NVVMReflect pass
    if (llvm::isa<llvm::Function>(gv) && is_device_runtime_function(gv.getName())) continue;  // libcudadevrt
    undefined.push_back(gv.getName().str() + " (" + users_text(gv) + ")");
  }
  if (undefined.empty()) return {};
  return invalid("undefined symbols remain after linking rtlib and libdevice: " + join(undefined, "; ") +
                 ". Define them in the module; only vprintf, malloc, free and __assertfail come from the driver, "
                 "and cuda*/__cudaCDP2* from the device runtime.");
}

// Links rtlib and libdevice as needed, checks what is left, and internalizes: only kernels (and
// device variables, which host code reads by name) stay visible.
Expected<void> link_device_libraries(llvm::Module& m, const Toolchain& toolchain, const CompileJob& job,
                                     Diagnostics& diags) {
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
  if (auto defined = check_undefined(m); !defined) return defined.error();
  std::set<std::string> kernels = kernel_names(m);
  llvm::internalizeModule(m, [&](const llvm::GlobalValue& gv) {
    return llvm::isa<llvm::GlobalVariable>(gv) || kernels.count(gv.getName().str()) > 0;
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

// Clang tags every function with the arch it was compiled for; the job's arch wins.
void retarget_functions(llvm::Module& m) {
  for (llvm::Function& f : m) {
    f.removeFnAttr("target-cpu");
    f.removeFnAttr("target-features");
  }
}




// Kernel names of a PTX module, from its .entry directives.
std::vector<KernelInfo> ptx_entries(std::string_view ptx) {
  static const std::regex entry(R"(\.entry\s+([A-Za-z_$%][A-Za-z0-9_$%]*))");
  std::vector<KernelInfo> out;
  std::string text(ptx);
  for (auto it = std::sregex_iterator(text.begin(), text.end(), entry); it != std::sregex_iterator(); ++it) {
    out.push_back(KernelInfo{.name = (*it)[1]});
  }
  return out;
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
    if (ptx_version < *floor) ptx_version = 0;
  }
  std::string features = ptx_version > 0 ? "+ptx" + std::to_string(ptx_version) : "";
  auto tm = make_target_machine(triple, arch, features, std::nullopt, job.spec.options.opt_level);
  if (!tm) return tm.error();
  m->setDataLayout((*tm)->createDataLayout());
  optimize(*m, **tm, job.spec.options.opt_level);
  return emit(*m, **tm, llvm::CodeGenFileType::AssemblyFile, diags, arch);
}

// Fills registers, shared/local memory and spills from `ptxas -v` output into `kernels`.
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

struct Assembled {
  std::string cubin;
  std::string log;  // resource usage per kernel, warnings
};

Expected<Assembled> assemble_with_ptxas(const Toolchain& toolchain, const CompileJob& job, std::string_view ptx,
                                        const std::string& arch, bool device_runtime, ErrorCode failure_code) {
  TempDir dir;
  if (dir.path().empty()) return make_error(ErrorCode::k_internal, "cannot create a scratch folder for ptxas");
  std::filesystem::path in = dir.path() / "module.ptx", out = dir.path() / "module.cubin";
  {
    std::ofstream f(in, std::ios::binary);
    f.write(ptx.data(), static_cast<std::streamsize>(ptx.size()));
    if (!f) return make_error(ErrorCode::k_internal, "cannot write " + in.string());
  }
  std::vector<std::string> argv = {toolchain.ptxas.string(), "-arch=" + arch, "-v",
                                   "--opt-level=" + std::to_string(job.spec.options.opt_level)};
  if (job.spec.options.debug_info) argv.push_back("--device-debug");
  if (job.spec.options.lineinfo) argv.push_back("--generate-line-info");
  // Dynamic parallelism: a relocatable object, then nvlink with the device runtime.
  std::filesystem::path object = dir.path() / "module.o";
  if (device_runtime) argv.push_back("--compile-only");
  argv.insert(argv.end(), {"-o", (device_runtime ? object : out).string(), in.string()});
  auto run = run_process(argv, job.deadline);
  if (!run) return run.error();
  if (run->exit_code != 0) {
    return make_error(failure_code, run->signal != 0 ? "ptxas was killed by signal " + std::to_string(run->signal)
                                                     : "ptxas rejected the PTX for " + arch + ":\n" + run->output);
  }
  std::string log = run->output;
  if (device_runtime) {
    auto link = run_process({toolchain.nvlink.string(), "-arch=" + arch, object.string(), toolchain.cudadevrt.string(),
                             "-o", out.string()},
                            job.deadline);
    if (!link) return link.error();
    if (link->exit_code != 0) return make_error(ErrorCode::k_internal, "nvlink failed for " + arch + ":\n" + link->output);
    log += link->output;
  }
  std::ifstream f(out, std::ios::binary);
  return Assembled{std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), log};
}

Expected<Assembled> assemble_with_nvjitlink(const Toolchain& toolchain, const CompileJob& job, std::string_view ptx,
                                            const std::string& arch, bool device_runtime, ErrorCode failure_code) {
  // nvJitLink takes only -O0/-O3 itself; ptxas inside it takes every level.
  std::vector<std::string> options = {"-Xptxas=--opt-level=" + std::to_string(job.spec.options.opt_level)};
  if (job.spec.options.debug_info) options.push_back("-g");
  if (job.spec.options.lineinfo) options.push_back("-lineinfo");
  std::vector<std::filesystem::path> libraries;
  if (device_runtime) libraries.push_back(toolchain.cudadevrt);
  auto result = toolchain.nvjitlink->assemble(ptx, arch, options, libraries, failure_code);
  if (!result) return result.error();
  return Assembled{std::move(result->cubin), std::move(result->info_log)};
}

// Assembles PTX to a cubin for `arch` (nvJitLink in process, else ptxas). `user_ptx` says the
// PTX came from the client, so complaints are about the input (INVALID_ARGUMENT), not about
// kcache (INTERNAL). Warnings come back verbatim as diagnostics.
Expected<Image> assemble_cubin(const Toolchain& toolchain, const CompileJob& job, std::string_view ptx,
                               const std::string& arch, bool user_ptx, bool device_runtime,
                               std::vector<std::string>& diagnostics) {
  ErrorCode failure_code = user_ptx ? ErrorCode::k_invalid_argument : ErrorCode::k_internal;
  if (device_runtime && (toolchain.cudadevrt.empty() || (!toolchain.nvjitlink && toolchain.nvlink.empty()))) {
    return make_error(ErrorCode::k_failed_precondition,
                      "the module launches kernels from the device (dynamic parallelism), which needs libcudadevrt.a "
                      "(and nvJitLink or nvlink) from the CUDA toolkit under " + toolchain.cuda_root.string());
  }
  auto assembled = toolchain.nvjitlink
                       ? assemble_with_nvjitlink(toolchain, job, ptx, arch, device_runtime, failure_code)
                       : assemble_with_ptxas(toolchain, job, ptx, arch, device_runtime, failure_code);
  if (!assembled) return assembled.error();
  if (assembled->cubin.empty()) return make_error(ErrorCode::k_internal, "no cubin came back for " + arch);
  std::istringstream lines(assembled->log);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("warning") != std::string::npos) diagnostics.push_back(line);
  }
  std::vector<KernelInfo> kernels = ptx_entries(ptx);
  read_resource_usage(assembled->log, kernels);
  return make_image({arch, ImageKind::cubin}, std::move(assembled->cubin), std::move(kernels));
}

Expected<CompileOutput> compile_ptx_input(const Toolchain& toolchain, const CompileJob& job) {
  CompileOutput out;
  if (job.module.empty()) return invalid("the module is empty: send LLVM bitcode, LLVM text IR or PTX");
  for (const ImageRequest& want : job.images) {
    if (want.kind != ImageKind::cubin) {
      return invalid("the input is already PTX; a PTX job emits cubin only (ask for --emit cubin)");
    }
    bool device_runtime = job.module.find("__cudaCDP2") != std::string_view::npos ||
                          job.module.find("cudaLaunchDevice") != std::string_view::npos;
    auto image = assemble_cubin(toolchain, job, job.module, want.arch, true, device_runtime, out.diagnostics);
    if (!image) return image.error();
    out.images.push_back(std::move(*image));
  }
  return out;
}

}  // namespace

Expected<CompileOutput> compile_device(const Toolchain& toolchain, const CompileJob& job) {
  if (job.spec.format == InputFormat::ptx) return compile_ptx_input(toolchain, job);

  auto loaded = load_module(job.spec.format, job.module);
  if (!loaded) return loaded.error();
  llvm::Module& module = *(*loaded)->module;
  Diagnostics& diags = (*loaded)->diags;
  if (auto checked = check_module(module, job); !checked) return checked.error();

  // The newest PTX ISA both LLVM and ptxas take, never older than the module asks for (inline
  // asm from CUDA headers needs it). Read before rtlib, whose clang tags would count too.
  int ptx_version = std::max(requested_ptx_version(module), toolchain.max_ptx_version);
  if (auto linked = link_device_libraries(module, toolchain, job, diags); !linked) return linked.error();
  bool device_runtime = uses_device_runtime(module);
  retarget_functions(module);
  apply_debug_options(module, job.spec.options);
  if (job.spec.options.fast_math) apply_fast_math(module);

  // One PTX per arch, shared by that arch's ptx and cubin images.
  std::map<std::string, std::string> ptx_by_arch;
  CompileOutput out;
  for (const ImageRequest& want : job.images) {
    auto ptx = ptx_by_arch.find(want.arch);
    if (ptx == ptx_by_arch.end()) {
      auto emitted = emit_ptx(module, job, want.arch, ptx_version, diags);
      if (!emitted) return emitted.error();
      ptx = ptx_by_arch.emplace(want.arch, std::move(*emitted)).first;
    }
    if (want.kind == ImageKind::ptx) {
      out.images.push_back(make_image(want, ptx->second, ptx_entries(ptx->second)));
      continue;
    }
    auto cubin = assemble_cubin(toolchain, job, ptx->second, want.arch, false, device_runtime, out.diagnostics);
    if (!cubin) return cubin.error();
    out.images.push_back(std::move(*cubin));
  }
  out.diagnostics.insert(out.diagnostics.begin(), diags.warnings.begin(), diags.warnings.end());
  return out;
}

}  // namespace kcache::server
