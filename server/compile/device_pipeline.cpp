#include "compile/device_pipeline.hpp"

#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/CallingConv.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DebugInfo.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Operator.h>
#include <llvm/IR/Verifier.h>
#include <llvm/AsmParser/Parser.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetMachine.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/Transforms/Utils/Cloning.h>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "compile/process.hpp"

namespace kcache::server {
namespace {

constexpr const char* k_module_name = "module";

Error invalid(std::string message) { return make_error(ErrorCode::k_invalid_argument, std::move(message)); }

// Collects what LLVM reports while a job runs; errors fail the job, warnings become diagnostics.
struct Diagnostics {
  std::vector<std::string> errors;
  std::vector<std::string> warnings;

  static void handle(const llvm::DiagnosticInfo* info, void* context) {
    auto* self = static_cast<Diagnostics*>(context);
    std::string text;
    llvm::raw_string_ostream os(text);
    llvm::DiagnosticPrinterRawOStream printer(os);
    info->print(printer);
    if (info->getSeverity() == llvm::DS_Error) self->errors.push_back(text);
    else if (info->getSeverity() == llvm::DS_Warning) self->warnings.push_back(text);
  }
};

Expected<std::unique_ptr<llvm::Module>> parse_module(llvm::LLVMContext& ctx, InputFormat format,
                                                     std::string_view bytes) {
  if (bytes.empty()) return invalid("the module is empty: send LLVM bitcode, LLVM text IR or PTX");
  if (format == InputFormat::llvm_bitcode) {
    llvm::MemoryBufferRef buffer(llvm::StringRef(bytes.data(), bytes.size()), k_module_name);
    if (!llvm::isBitcode(reinterpret_cast<const unsigned char*>(bytes.data()),
                         reinterpret_cast<const unsigned char*>(bytes.data() + bytes.size()))) {
      return invalid("the module is not LLVM bitcode (it does not start with the bitcode magic 'BC' 0xC0DE); "
                     "send text IR with format ll, or PTX with format ptx");
    }
    auto module = llvm::parseBitcodeFile(buffer, ctx);
    if (!module) return invalid("the module is not valid LLVM bitcode: " + llvm::toString(module.takeError()));
    return std::move(*module);
  }
  // The text parser needs a NUL-terminated buffer; the copy provides it.
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(llvm::StringRef(bytes.data(), bytes.size()), "module.ll");
  llvm::SMDiagnostic diagnostic;
  auto module = llvm::parseAssembly(buffer->getMemBufferRef(), diagnostic, ctx);
  if (!module) {
    return invalid("LLVM IR syntax error at module.ll:" + std::to_string(diagnostic.getLineNo()) + ":" +
                   std::to_string(diagnostic.getColumnNo() + 1) + ": " + diagnostic.getMessage().str() +
                   (diagnostic.getLineContents().empty() ? "" : "\n  " + diagnostic.getLineContents().str()));
  }
  return module;
}

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

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

// Fast math: every floating-point operation may be reassociated and approximated, and f32
// denormals flush to zero (NVPTX's .ftz).
void apply_fast_math(llvm::Module& m) {
  for (llvm::Function& f : m) {
    if (f.isDeclaration()) continue;
    f.addFnAttr("denormal-fp-math-f32", "preserve-sign,preserve-sign");
    for (llvm::BasicBlock& bb : f) {
      for (llvm::Instruction& inst : bb) {
        if (llvm::isa<llvm::FPMathOperator>(inst)) inst.setFast(true);
      }
    }
  }
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

llvm::OptimizationLevel optimization_level(std::uint32_t level) {
  switch (level) {
    case 0: return llvm::OptimizationLevel::O0;
    case 1: return llvm::OptimizationLevel::O1;
    case 3: return llvm::OptimizationLevel::O3;
    default: return llvm::OptimizationLevel::O2;
  }
}

llvm::CodeGenOptLevel codegen_level(std::uint32_t level) {
  switch (level) {
    case 0: return llvm::CodeGenOptLevel::None;
    case 1: return llvm::CodeGenOptLevel::Less;
    case 3: return llvm::CodeGenOptLevel::Aggressive;
    default: return llvm::CodeGenOptLevel::Default;
  }
}

void optimize(llvm::Module& m, llvm::TargetMachine& tm, std::uint32_t level) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);  // with the target machine, so NVPTX's own passes (NVVMReflect, ...) run
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = level == 0 ? pb.buildO0DefaultPipeline(llvm::OptimizationLevel::O0)
                                           : pb.buildPerModuleDefaultPipeline(optimization_level(level));
  mpm.run(m, mam);
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
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (target == nullptr) return make_error(ErrorCode::k_internal, "LLVM has no NVPTX target: " + error);
  std::string features = ptx_version > 0 ? "+ptx" + std::to_string(ptx_version) : "";
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(target->createTargetMachine(
      triple, arch, features, options, std::nullopt, std::nullopt, codegen_level(job.spec.options.opt_level)));
  if (!tm) return make_error(ErrorCode::k_internal, "LLVM cannot create a target machine for " + arch);
  m->setDataLayout(tm->createDataLayout());

  optimize(*m, *tm, job.spec.options.opt_level);

  llvm::SmallString<0> ptx;
  llvm::raw_svector_ostream os(ptx);
  llvm::legacy::PassManager pm;
  if (tm->addPassesToEmitFile(pm, os, nullptr, llvm::CodeGenFileType::AssemblyFile)) {
    return make_error(ErrorCode::k_internal, "LLVM's NVPTX backend cannot emit PTX for " + arch);
  }
  pm.run(*m);
  if (!diags.errors.empty()) {
    return invalid("LLVM failed to compile the module for " + arch + ": " + join(diags.errors, "; "));
  }
  return std::string(ptx.str());
}

// A scratch folder removed when the job ends.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kcache-job-XXXXXX").string();
    if (mkdtemp(pattern.data()) != nullptr) m_path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    if (!m_path.empty()) std::filesystem::remove_all(m_path, ec);
  }
  const std::filesystem::path& path() const { return m_path; }

 private:
  std::filesystem::path m_path;
};

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
  ctx.setDiagnosticHandlerCallBack(&Diagnostics::handle, &diags);
  auto parsed = parse_module(ctx, job.spec.format, job.module);
  if (!parsed) return parsed.error();
  llvm::Module& module = **parsed;

  std::string verifier;
  llvm::raw_string_ostream verifier_os(verifier);
  if (llvm::verifyModule(module, &verifier_os)) {
    return invalid("the module fails the LLVM verifier:\n" + verifier);
  }
  if (auto checked = check_module(module, job); !checked) return checked.error();

  int ptx_version = requested_ptx_version(module);
  retarget_functions(module);
  if (!job.spec.options.debug_info) {
    if (job.spec.options.lineinfo) llvm::stripNonLineTableDebugInfo(module);
    else llvm::StripDebugInfo(module);
  }
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
