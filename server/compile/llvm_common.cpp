#include "compile/llvm_common.hpp"

#include "compile/compiler.hpp"

#include <llvm/Support/ErrorHandling.h>
#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/AsmParser/Parser.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DebugInfo.h>
#include <llvm/IR/GlobalAlias.h>
#include <llvm/IR/GlobalIFunc.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Operator.h>
#include <llvm/IR/Verifier.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/Config/llvm-config.h>

#include <cstdlib>
#include <set>

namespace kcache::server {
namespace {

void handle_diagnostic(const llvm::DiagnosticInfo* info, void* context) {
  auto* self = static_cast<Diagnostics*>(context);
  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::DiagnosticPrinterRawOStream printer(os);
  info->print(printer);
  if (info->getSeverity() == llvm::DS_Error) self->errors.push_back(text);
  else if (info->getSeverity() == llvm::DS_Warning) self->warnings.push_back(text);
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

Expected<std::unique_ptr<llvm::Module>> parse(llvm::LLVMContext& ctx, InputFormat format, std::string_view bytes) {
  if (bytes.empty()) return invalid("the module is empty: send LLVM bitcode, LLVM text IR or PTX");
  if (format == InputFormat::llvm_bitcode) {
    if (!llvm::isBitcode(reinterpret_cast<const unsigned char*>(bytes.data()),
                         reinterpret_cast<const unsigned char*>(bytes.data() + bytes.size()))) {
      return invalid("the module is not LLVM bitcode (it does not start with the bitcode magic 'BC' 0xC0DE); "
                     "send text IR with format ll, or PTX with format ptx");
    }
    llvm::MemoryBufferRef buffer(llvm::StringRef(bytes.data(), bytes.size()), "module.bc");
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

// Names what refers to `v`, looking through constant expressions and aggregates.
void collect_users(const llvm::Value* v, std::set<std::string>& out, std::set<const llvm::Value*>& seen) {
  for (const llvm::User* u : v->users()) {
    if (!seen.insert(u).second) continue;
    if (const auto* inst = llvm::dyn_cast<llvm::Instruction>(u)) {
      out.insert("function '" + inst->getFunction()->getName().str() + "'");
    } else if (const auto* f = llvm::dyn_cast<llvm::Function>(u)) {
      out.insert("function '" + f->getName().str() + "' (personality or prefix data)");
    } else if (const auto* gv = llvm::dyn_cast<llvm::GlobalVariable>(u)) {
      std::string name = gv->getName().str();
      out.insert(name == "llvm.used" || name == "llvm.compiler.used" ? name : "global '" + name + "'");
    } else if (const auto* ga = llvm::dyn_cast<llvm::GlobalAlias>(u)) {
      out.insert("alias '" + ga->getName().str() + "'");
    } else if (const auto* gi = llvm::dyn_cast<llvm::GlobalIFunc>(u)) {
      out.insert("ifunc '" + gi->getName().str() + "'");
    } else if (llvm::isa<llvm::Constant>(u)) {
      collect_users(u, out, seen);
    }
  }
}

}  // namespace

std::vector<std::string> users_of(const llvm::GlobalValue& gv) {
  std::set<std::string> users;
  std::set<const llvm::Value*> seen;
  collect_users(&gv, users, seen);
  return {users.begin(), users.end()};
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

void Diagnostics::install(llvm::LLVMContext& ctx) { ctx.setDiagnosticHandlerCallBack(&handle_diagnostic, this); }

Expected<std::unique_ptr<LoadedModule>> load_module(InputFormat format, std::string_view bytes) {
  auto loaded = std::make_unique<LoadedModule>();
  loaded->diags.install(loaded->ctx);
  auto module = parse(loaded->ctx, format, bytes);
  if (!module) return module.error();
  std::string report;
  llvm::raw_string_ostream os(report);
  if (llvm::verifyModule(**module, &os)) return invalid("the module fails the LLVM verifier:\n" + report);
  loaded->module = std::move(*module);
  return loaded;
}

void apply_debug_options(llvm::Module& m, const CompileOptions& options) {
  if (options.debug_info) return;
  if (options.lineinfo) llvm::stripNonLineTableDebugInfo(m);
  else llvm::StripDebugInfo(m);
}

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

Expected<std::unique_ptr<llvm::TargetMachine>> make_target_machine(const llvm::Triple& triple, const std::string& cpu,
                                                                  const std::string& features,
                                                                  std::optional<llvm::Reloc::Model> reloc,
                                                                  std::uint32_t opt_level) {
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (target == nullptr) {
    return invalid("LLVM " LLVM_VERSION_STRING " has no target for '" + triple.str() + "': " + error);
  }
  llvm::TargetOptions options;
  std::unique_ptr<llvm::TargetMachine> tm(
      target->createTargetMachine(triple, cpu, features, options, reloc, std::nullopt, codegen_level(opt_level)));
  if (!tm) return invalid("LLVM cannot create a target machine for " + triple.str() + " / " + cpu);
  return tm;
}

void optimize(llvm::Module& m, llvm::TargetMachine& tm, std::uint32_t opt_level) {
  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder pb(&tm);  // with the target machine, so its own passes (NVVMReflect, ...) run
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cgam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cgam, mam);
  llvm::ModulePassManager mpm = opt_level == 0 ? pb.buildO0DefaultPipeline(llvm::OptimizationLevel::O0)
                                               : pb.buildPerModuleDefaultPipeline(optimization_level(opt_level));
  mpm.run(m, mam);
}

Expected<std::string> emit(llvm::Module& m, llvm::TargetMachine& tm, llvm::CodeGenFileType type,
                           const Diagnostics& diags, const std::string& what) {
  llvm::SmallString<0> out;
  llvm::raw_svector_ostream os(out);
  llvm::legacy::PassManager pm;
  if (tm.addPassesToEmitFile(pm, os, nullptr, type)) {  // true means failure
    return make_error(ErrorCode::k_internal, "LLVM cannot emit code for " + what);
  }
  pm.run(m);
  if (!diags.errors.empty()) return invalid("LLVM failed to compile the module for " + what + ": " + join(diags.errors, "; "));
  return std::string(out.str());
}

TempDir::TempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "kcache-job-XXXXXX").string();
  if (mkdtemp(pattern.data()) != nullptr) m_path = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!m_path.empty()) std::filesystem::remove_all(m_path, ec);
}

void throw_bad_alloc_from_llvm() {
  llvm::install_bad_alloc_error_handler([](void*, const char*, bool) { throw std::bad_alloc(); });
}

}  // namespace kcache::server
