#include "compile/llvm_common.hpp"

#include "compile/compiler.hpp"
#include "kcache/rtlib.hpp"

#include <llvm/Support/ErrorHandling.h>
#include <llvm/Analysis/CGSCCPassManager.h>
#include <llvm/Analysis/LoopAnalysisManager.h>
#include <llvm/AsmParser/Parser.h>
#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/IR/AutoUpgrade.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/DebugInfo.h>
#include <llvm/IR/GlobalAlias.h>
#include <llvm/IR/GlobalIFunc.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/LegacyPassManager.h>
#include <llvm/IR/Operator.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Linker/Linker.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Passes/PassBuilder.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/SourceMgr.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/Target/TargetOptions.h>
#include <llvm/Config/llvm-config.h>

#include <cstdlib>
#include <algorithm>
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

// What LLVM's nvvm.annotations upgrade (llvm::UpgradeNVVMAnnotations, run by the text parser)
// takes for granted without checking in a release build: found by fuzz/module_fuzzer, an entry
// with a key but no value made it read past the end of the tuple and crash the worker.
constexpr std::string_view k_annotations = "nvvm.annotations";
constexpr std::string_view k_unchecked_annotations = "kcache.unchecked.nvvm.annotations";

bool is_int(const llvm::Metadata* md) { return llvm::mdconst::dyn_extract_or_null<llvm::ConstantInt>(md) != nullptr; }

// Each entry: a function or global (or null), then KEY, VALUE pairs; keys are strings; values
// are integers, or (grid_constant) a tuple of integers. The keys LLVM turns into function
// attributes must annotate a function, and "align" must hold a power of two.
Expected<void> check_annotations(const llvm::NamedMDNode& annotations) {
  static const std::set<std::string, std::less<>> function_keys = {
      "kernel",      "maxntidx",      "maxntidy",      "maxntidz",       "reqntidx",           "reqntidy",
      "reqntidz",    "cluster_dim_x", "cluster_dim_y", "cluster_dim_z",  "maxclusterrank",     "cluster_max_blocks",
      "minctasm",    "maxnreg",       "grid_constant", "align"};
  for (unsigned i = 0; i < annotations.getNumOperands(); ++i) {
    const llvm::MDNode* entry = annotations.getOperand(i);
    auto bad = [&](const std::string& why) {
      return invalid("!nvvm.annotations entry " + std::to_string(i) + " is malformed: " + why +
                     " (expected !{ptr @function, !\"key\", i32 value, ...})");
    };
    if (!llvm::isa<llvm::MDTuple>(entry) || entry->getNumOperands() == 0) return bad("it is not a non-empty tuple");
    if (entry->getNumOperands() % 2 == 0) return bad("a key has no value");
    const llvm::Metadata* target = entry->getOperand(0);
    auto* global = llvm::mdconst::dyn_extract_or_null<llvm::GlobalValue>(target);
    if (target != nullptr && global == nullptr) return bad("its first element is not a function or global");
    for (unsigned j = 1; j + 1 < entry->getNumOperands(); j += 2) {
      auto* key = llvm::dyn_cast_or_null<llvm::MDString>(entry->getOperand(j));
      if (key == nullptr) return bad("element " + std::to_string(j) + " is not a key string");
      const llvm::Metadata* value = entry->getOperand(j + 1);
      std::string name = key->getString().str();
      if (name == "grid_constant") {
        auto* list = llvm::dyn_cast_or_null<llvm::MDTuple>(value);
        if (list == nullptr || !std::all_of(list->op_begin(), list->op_end(), [](const llvm::MDOperand& o) {
              return is_int(o.get());
            })) {
          return bad("grid_constant's value is not a tuple of integers");
        }
      } else if (!is_int(value)) {
        return bad("the value of '" + name + "' is not an integer");
      }
      if (function_keys.contains(name) && (global == nullptr || !llvm::isa<llvm::Function>(global))) {
        return bad("'" + name + "' annotates something that is not a function");
      }
      if (name == "align") {
        std::uint64_t v = llvm::mdconst::extract<llvm::ConstantInt>(value)->getZExtValue() & 0xFFFF;
        if (v == 0 || (v & (v - 1)) != 0) return bad("an 'align' value is not a power of two");
      }
    }
  }
  return {};
}

// `text` with each definition of the named metadata !nvvm.annotations (at the start of a line,
// before '=') renamed to !kcache.unchecked.nvvm.annotations.
std::string hide_annotations(std::string_view text) {
  static constexpr std::string_view name = "!nvvm.annotations";
  std::string out;
  std::size_t done = 0;
  for (std::size_t at = text.find(name); at != std::string_view::npos; at = text.find(name, at + name.size())) {
    std::size_t line = text.find_last_not_of(" \t", at == 0 ? std::string_view::npos : at - 1);
    bool line_start = at == 0 || line == std::string_view::npos || text[line] == '\n';
    std::size_t after = text.find_first_not_of(" \t", at + name.size());
    if (!line_start || after == std::string_view::npos || text[after] != '=') continue;
    out.append(text.substr(done, at - done)).append("!").append(k_unchecked_annotations);
    done = at + name.size();
  }
  return out.append(text.substr(done));
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
    if (const llvm::NamedMDNode* annotations = (*module)->getNamedMetadata(k_annotations)) {
      if (auto checked = check_annotations(*annotations); !checked) return checked.error();
    }
    return std::move(*module);
  }
  // The text parser upgrades !nvvm.annotations as it finishes, before anything could check them:
  // they are renamed for the parse, checked, then restored and upgraded as the parser would.
  std::string text = hide_annotations(bytes);
  // The text parser needs a NUL-terminated buffer; the copy provides it.
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(text, "module.ll");
  llvm::SMDiagnostic diagnostic;
  auto module = llvm::parseAssembly(buffer->getMemBufferRef(), diagnostic, ctx);
  if (!module) {
    return invalid("LLVM IR syntax error at module.ll:" + std::to_string(diagnostic.getLineNo()) + ":" +
                   std::to_string(diagnostic.getColumnNo() + 1) + ": " + diagnostic.getMessage().str() +
                   (diagnostic.getLineContents().empty() ? "" : "\n  " + diagnostic.getLineContents().str()));
  }
  if (llvm::NamedMDNode* unchecked = module->getNamedMetadata(k_unchecked_annotations)) {
    if (auto checked = check_annotations(*unchecked); !checked) return checked.error();
    llvm::NamedMDNode* annotations = module->getOrInsertNamedMetadata(k_annotations);
    for (llvm::MDNode* entry : unchecked->operands()) annotations->addOperand(entry);
    module->eraseNamedMetadata(unchecked);
    llvm::UpgradeNVVMAnnotations(*module);
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

const rtlib::RuntimeFunction* runtime_function(std::string_view name) {
  for (const rtlib::RuntimeFunction& f : rtlib::runtime_functions()) {
    if (f.name == name) return &f;
  }
  return nullptr;
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

std::string join_capped(const std::vector<std::string>& items, std::size_t budget) {
  std::string out;
  std::size_t shown = 0;
  for (; shown < items.size(); ++shown) {
    std::string_view item = std::string_view(items[shown]).substr(0, 200);  // one long name never fills it
    if (shown > 0 && out.size() + item.size() + 2 > budget) break;
    if (shown > 0) out += ", ";
    out += item;
  }
  if (shown < items.size()) out += " and " + std::to_string(items.size() - shown) + " more";
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

Expected<std::unique_ptr<LoadedModule>> load_and_link(const std::vector<ModuleSource>& modules) {
  if (modules.empty()) return invalid("the job has no LLVM IR module");
  auto loaded = load_module(modules[0].format, modules[0].bytes);
  if (!loaded) return loaded.error();
  llvm::Module& into = *(*loaded)->module;
  for (std::size_t i = 1; i < modules.size(); ++i) {
    const ModuleSource& source = modules[i];
    auto module = parse((*loaded)->ctx, source.format, source.bytes);
    if (!module) return make_error(module.error().code, source.name + ": " + module.error().message);
    std::string report;
    llvm::raw_string_ostream os(report);
    if (llvm::verifyModule(**module, &os)) return invalid(source.name + " fails the LLVM verifier:\n" + report);
    const llvm::Triple& triple = (*module)->getTargetTriple();
    if (!triple.str().empty() && !into.getTargetTriple().str().empty() &&
        triple.getArch() != into.getTargetTriple().getArch()) {
      return invalid(source.name + " targets '" + triple.str() + "' but the first module targets '" +
                     into.getTargetTriple().str() + "': a job links modules for one target");
    }
    // The first module's triple and layout win; clang writes the same ones into every module.
    (*module)->setTargetTriple(into.getTargetTriple());
    (*module)->setDataLayout(into.getDataLayout());
    (*loaded)->diags.errors.clear();
    if (llvm::Linker::linkModules(into, std::move(*module))) {
      return invalid("cannot link " + source.name + " with the modules before it: " +
                     join((*loaded)->diags.errors, "; "));
    }
  }
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

std::string users_text(const llvm::GlobalValue& gv) {
  auto users = users_of(gv);
  return users.empty() ? "unused" : "used by " + join(users, ", ");
}

// Checks every reference to a runtime function against the manifest, before linking: GPUCompiler
// said only "Invalid return type for runtime function 'box_bool'"; this says which declaration,
// what rtlib expects, and who made the call. Returns whether rtlib is needed (a runtime function,
// or a C++ ABI function rtlib defines, such as __cxa_pure_virtual from a vtable).
Expected<void> mark_entry_points(llvm::Module& m, const std::vector<std::string>& names, llvm::CallingConv::ID kernel_cc) {
  for (const std::string& name : names) {
    llvm::Function* f = m.getFunction(name);
    if (f == nullptr || f->isDeclaration()) {
      std::vector<std::string> defined;
      for (const llvm::Function& g : m) {
        if (!g.isDeclaration()) defined.push_back(g.getName().str());
      }
      return invalid("entry point '" + name + "' is not defined in the module (defined functions: " +
                     (defined.empty() ? std::string("none") : join_capped(defined, 400)) + ")");
    }
    if (!f->getReturnType()->isVoidTy()) return invalid("entry point '" + name + "' returns a value; GPU kernels return void");
    f->setCallingConv(kernel_cc);
    f->setLinkage(llvm::GlobalValue::ExternalLinkage);
  }
  return {};
}

Expected<bool> check_runtime_references(const llvm::Module& m) {
  bool needed = false;
  for (const llvm::Function& f : m) {
    std::string name = f.getName().str();
    if (!name.starts_with("gpu_")) {
      needed = needed || (f.isDeclaration() && !f.use_empty() && rtlib::provider_of(name) == rtlib::Provider::rtlib);
      continue;
    }
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

// Links `bitcode` into `m`, taking only the definitions `m` uses.
Expected<void> link_needed(llvm::Module& m, std::string_view bitcode, const std::string& what, Diagnostics& diags) {
  // Read lazily: a function's body is read only when the link needs it, so a module calling
  // three of libdevice's or ocml's hundreds of functions does not parse the rest.
  llvm::MemoryBufferRef buffer(llvm::StringRef(bitcode.data(), bitcode.size()), what);
  auto library = llvm::getLazyBitcodeModule(buffer, m.getContext());
  if (!library) {
    return make_error(ErrorCode::k_internal, "cannot read " + what + ": " + llvm::toString(library.takeError()));
  }
  if (llvm::Error e = (*library)->materializeMetadata()) {
    return make_error(ErrorCode::k_internal, "cannot read " + what + ": " + llvm::toString(std::move(e)));
  }
  (*library)->setTargetTriple(m.getTargetTriple());
  (*library)->setDataLayout(m.getDataLayout());
  if (llvm::Linker::linkModules(m, std::move(*library), llvm::Linker::Flags::LinkOnlyNeeded)) {
    return make_error(ErrorCode::k_internal, "linking " + what + " failed: " + join(diags.errors, "; "));
  }
  return {};
}

void retarget_functions(llvm::Module& m) {
  for (llvm::Function& f : m) {
    f.removeFnAttr("target-cpu");
    f.removeFnAttr("target-features");
  }
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

void throw_fatal_errors_from_llvm() {
  llvm::install_fatal_error_handler([](void*, const char* reason, bool) { throw LlvmFatalError(reason); });
}

}  // namespace kcache::server
