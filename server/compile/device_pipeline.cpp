#include "compile/device_pipeline.hpp"

#include <llvm/IR/CallingConv.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "compile/llvm_common.hpp"
#include "compile/process.hpp"

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

Expected<std::string> emit_ptx(const llvm::Module& source, const CompileJob& job, const std::string& arch,
                               int ptx_version, Diagnostics& diags) {
  std::unique_ptr<llvm::Module> m = llvm::CloneModule(source);
  llvm::Triple triple{llvm::StringRef(k_device_triple.data(), k_device_triple.size())};
  m->setTargetTriple(triple);
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

// Assembles PTX to a cubin for `arch` with ptxas. `user_ptx` says the PTX came from the client,
// so ptxas's complaints are about the input (INVALID_ARGUMENT), not about kcache (INTERNAL).
Expected<Image> assemble_cubin(const Toolchain& toolchain, const CompileJob& job, std::string_view ptx,
                               const std::string& arch, bool user_ptx, std::vector<std::string>& diagnostics) {
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
  argv.insert(argv.end(), {"-o", out.string(), in.string()});
  auto run = run_process(argv);
  if (!run) return run.error();
  if (run->exit_code != 0) {
    std::string why = run->signal != 0 ? "ptxas was killed by signal " + std::to_string(run->signal)
                                       : "ptxas rejected the PTX for " + arch + ":\n" + run->output;
    return make_error(user_ptx ? ErrorCode::k_invalid_argument : ErrorCode::k_internal, why);
  }
  std::istringstream lines(run->output);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("warning") != std::string::npos) diagnostics.push_back(line);
  }
  std::ifstream f(out, std::ios::binary);
  std::string cubin((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (cubin.empty()) return make_error(ErrorCode::k_internal, "ptxas produced no cubin for " + arch);
  std::vector<KernelInfo> kernels = ptx_entries(ptx);
  read_resource_usage(run->output, kernels);
  return make_image({arch, ImageKind::cubin}, std::move(cubin), std::move(kernels));
}

Expected<CompileOutput> compile_ptx_input(const Toolchain& toolchain, const CompileJob& job) {
  CompileOutput out;
  if (job.module.empty()) return invalid("the module is empty: send LLVM bitcode, LLVM text IR or PTX");
  for (const ImageRequest& want : job.images) {
    if (want.kind != ImageKind::cubin) {
      return invalid("the input is already PTX; a PTX job emits cubin only (ask for --emit cubin)");
    }
    auto image = assemble_cubin(toolchain, job, job.module, want.arch, true, out.diagnostics);
    if (!image) return image.error();
    out.images.push_back(std::move(*image));
  }
  return out;
}

}  // namespace

Expected<CompileOutput> compile_device(const Toolchain& toolchain, const CompileJob& job) {
  if (job.spec.format == InputFormat::ptx) return compile_ptx_input(toolchain, job);

  llvm::LLVMContext ctx;
  Diagnostics diags;
  diags.install(ctx);
  auto parsed = parse_and_verify(ctx, job.spec.format, job.module);
  if (!parsed) return parsed.error();
  llvm::Module& module = **parsed;
  if (auto checked = check_module(module, job); !checked) return checked.error();

  int ptx_version = requested_ptx_version(module);
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
    auto cubin = assemble_cubin(toolchain, job, ptx->second, want.arch, false, out.diagnostics);
    if (!cubin) return cubin.error();
    out.images.push_back(std::move(*cubin));
  }
  out.diagnostics.insert(out.diagnostics.begin(), diags.warnings.begin(), diags.warnings.end());
  return out;
}

}  // namespace kcache::server
