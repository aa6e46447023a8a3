#include "compile/guard.hpp"

#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/GlobalAlias.h>
#include <llvm/IR/GlobalIFunc.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/InstIterator.h>
#include <llvm/IR/Instructions.h>

#include <optional>
#include <set>
#include <unordered_map>

#include "compile/llvm_common.hpp"
#include "kcache/rtlib.hpp"

namespace kcache::server {
namespace {

// Address spaces that mean GPU memory, which host code cannot reach: NVPTX's 1 global, 3 shared,
// 4 constant, 5 local, 6 tensor, 7 shared cluster and 101 kernel parameters; AMDGPU's 1 global,
// 2 region, 3 local, 4 constant, 5 private, 6 32-bit constant, 7 buffer fat pointer, 8 buffer
// resource and 9 buffer strided pointer. x86's own (256-258 segment registers, 270-272 mixed-size
// pointers) are host address spaces and stay legal.
bool is_gpu_address_space(unsigned as) { return (as >= 1 && as <= 9) || as == 101; }

// What a device-only name is, for messages; rtlib::is_device_only_symbol decides which names are.
std::string describe(std::string_view name) {
  for (const auto& f : rtlib::runtime_functions()) {
    if (f.name == name) return "rtlib function";
  }
  if (name.starts_with("llvm.nvvm.")) return "NVVM intrinsic";
  if (name.starts_with("llvm.amdgcn.")) return "AMDGPU intrinsic";
  if (name.starts_with("__ocml_") || name.starts_with("__ockl_")) return "ROCm device library function";
  if (name.starts_with("__oclc_")) return "ROCm device library control constant";
  if (name.starts_with("gpu_")) return "reserved gpu_ name";
  return "device-only symbol";
}

std::string kind_of(const llvm::GlobalValue& gv) {
  if (llvm::isa<llvm::Function>(gv)) return "function";
  if (llvm::isa<llvm::GlobalVariable>(gv)) return "variable";
  if (llvm::isa<llvm::GlobalAlias>(gv)) return "alias";
  return "ifunc";
}

GuardFinding finding_for(const llvm::GlobalValue& gv, std::string what, unsigned address_space = 0) {
  return GuardFinding{gv.getName().str(), std::move(what), users_of(gv), address_space};
}

// Finds pointers into GPU memory: the first GPU address space that a type, a constant, a
// function (its signature or any instruction) or a global's contents names. Remembers each type
// and constant, which many functions share.
class GpuPointerScan {
 public:
  std::optional<unsigned> in_type(const llvm::Type* type) {
    if (auto it = m_types.find(type); it != m_types.end()) return it->second;
    std::optional<unsigned> found;
    if (const auto* pointer = llvm::dyn_cast<llvm::PointerType>(type)) {
      if (is_gpu_address_space(pointer->getAddressSpace())) found = pointer->getAddressSpace();
    } else {
      // Elements of vectors, arrays and structs; a function type's result and parameters.
      for (const llvm::Type* sub : type->subtypes()) {
        if ((found = in_type(sub))) break;
      }
    }
    m_types[type] = found;
    return found;
  }

  // Looks through constant expressions (addrspacecast, inttoptr, getelementptr) and aggregates;
  // a global counts by the pointer to it, its own contents are checked as a global.
  std::optional<unsigned> in_constant(const llvm::Constant* c) {
    if (auto it = m_constants.find(c); it != m_constants.end()) return it->second;
    std::optional<unsigned> found = in_type(c->getType());
    if (!found && !llvm::isa<llvm::GlobalValue>(c)) {
      for (const llvm::Value* op : c->operand_values()) {
        const auto* sub = llvm::dyn_cast<llvm::Constant>(op);
        if (sub != nullptr && (found = in_constant(sub))) break;
      }
    }
    m_constants[c] = found;
    return found;
  }

  std::optional<unsigned> in_value(const llvm::Value* v) {
    if (const auto* c = llvm::dyn_cast<llvm::Constant>(v)) return in_constant(c);
    return in_type(v->getType());
  }

  // Parameters and result, then every instruction: its result, its operands (loads, stores and
  // atomics through such a pointer, addrspacecast, calls passing one), what it allocates, indexes
  // or calls.
  std::optional<unsigned> in_function(const llvm::Function& f) {
    if (auto found = in_type(f.getFunctionType())) return found;
    for (const llvm::Instruction& inst : llvm::instructions(f)) {
      if (auto found = in_type(inst.getType())) return found;
      for (const llvm::Value* op : inst.operand_values()) {
        if (auto found = in_value(op)) return found;
      }
      const llvm::Type* inner = nullptr;
      if (const auto* alloca = llvm::dyn_cast<llvm::AllocaInst>(&inst)) inner = alloca->getAllocatedType();
      else if (const auto* gep = llvm::dyn_cast<llvm::GetElementPtrInst>(&inst)) inner = gep->getSourceElementType();
      else if (const auto* call = llvm::dyn_cast<llvm::CallBase>(&inst)) inner = call->getFunctionType();
      if (inner == nullptr) continue;
      if (auto found = in_type(inner)) return found;
    }
    return std::nullopt;
  }

  // What a global holds or points at, beyond its own address space: a function's signature and
  // body, a variable's type and initializer, an alias's target.
  std::optional<unsigned> in_global(const llvm::GlobalValue& gv) {
    if (const auto* f = llvm::dyn_cast<llvm::Function>(&gv)) return in_function(*f);
    if (const auto* var = llvm::dyn_cast<llvm::GlobalVariable>(&gv)) {
      if (auto found = in_type(var->getValueType())) return found;
      if (var->hasInitializer()) return in_constant(var->getInitializer());
      return std::nullopt;
    }
    if (const auto* alias = llvm::dyn_cast<llvm::GlobalAlias>(&gv)) return in_constant(alias->getAliasee());
    return std::nullopt;  // an ifunc's resolver is a function, checked on its own
  }

 private:
  std::unordered_map<const llvm::Type*, std::optional<unsigned>> m_types;
  std::unordered_map<const llvm::Constant*, std::optional<unsigned>> m_constants;
};

std::string gpu_use(const llvm::GlobalValue& gv, unsigned as) {
  std::string space = "GPU address space " + std::to_string(as);
  if (llvm::isa<llvm::Function>(gv)) return "function using pointers into " + space;
  if (llvm::isa<llvm::GlobalVariable>(gv)) return "variable holding a pointer into " + space;
  return kind_of(gv) + " of a pointer into " + space;
}

llvm::Function* hook(llvm::Module& m) {
  if (llvm::Function* existing = m.getFunction(k_device_only_hook)) return existing;
  llvm::LLVMContext& ctx = m.getContext();
  auto* ptr = llvm::PointerType::getUnqual(ctx);
  auto* fn = llvm::Function::Create(llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), {ptr}, false),
                                    llvm::GlobalValue::WeakAnyLinkage, k_device_only_hook, m);
  auto dprintf = m.getOrInsertFunction(
      "dprintf", llvm::FunctionType::get(llvm::Type::getInt32Ty(ctx), {llvm::Type::getInt32Ty(ctx), ptr}, true));
  auto abort = m.getOrInsertFunction("abort", llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), false));
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", fn));
  llvm::Value* format = b.CreateGlobalString("device-only function %s called on the host\n", "kcache.hook.format");
  b.CreateCall(dprintf, {b.getInt32(2), format, fn->getArg(0)});
  b.CreateCall(abort)->setDoesNotReturn();
  b.CreateUnreachable();
  return fn;
}

// Fills `f` (a fresh definition) with: call the hook with `name`, then unreachable.
void fill_stub_body(llvm::Module& m, llvm::Function& f, const std::string& name) {
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(m.getContext(), "stub", &f));
  llvm::Value* text = b.CreateGlobalString(name, "kcache.stub.name");
  b.CreateCall(hook(m), {text});
  b.CreateUnreachable();
}

// A private host function of type `type` that reports `name` when called.
llvm::Function* make_stub(llvm::Module& m, llvm::FunctionType* type, const std::string& name) {
  auto* stub = llvm::Function::Create(type, llvm::GlobalValue::PrivateLinkage, "kcache.host_stub." + name, m);
  fill_stub_body(m, *stub, name);
  return stub;
}

// Replaces the body of host function `f` with a stub of itself, keeping its linkage and ABI.
void stub_out_body(llvm::Module& m, llvm::Function& f) {
  auto linkage = f.getLinkage();
  auto visibility = f.getVisibility();
  f.deleteBody();
  f.setLinkage(linkage);
  f.setVisibility(visibility);
  f.removeFnAttr(llvm::Attribute::Memory);
  f.removeFnAttr(llvm::Attribute::WillReturn);
  f.removeFnAttr(llvm::Attribute::Speculatable);
  fill_stub_body(m, f, f.getName().str());
}

}  // namespace

std::vector<GuardFinding> find_device_only(const llvm::Module& m) {
  std::vector<GuardFinding> out;
  GpuPointerScan scan;
  for (const llvm::GlobalValue& gv : m.global_values()) {
    if (rtlib::is_device_only_symbol(gv.getName())) {
      out.push_back(finding_for(gv, describe(gv.getName())));
    } else if (unsigned as = gv.getAddressSpace(); is_gpu_address_space(as)) {
      out.push_back(finding_for(gv, kind_of(gv) + " in GPU address space " + std::to_string(as), as));
    } else if (auto used = scan.in_global(gv)) {
      out.push_back(finding_for(gv, gpu_use(gv, *used), *used));
    }
  }
  return out;
}

Error guard_rejection(const std::vector<GuardFinding>& findings) {
  std::string message =
      "the host module refers to device-only symbols, so nothing was compiled (guard policy reject):";
  for (const GuardFinding& f : findings) {
    message += "\n  " + f.symbol + " (" + f.what + "), " +
               (f.users.empty() ? std::string("declared but unused") : "used by " + join(f.users, ", "));
  }
  message += "\nCompile these functions for the device, or send the job with guard policy stub to replace them "
             "with host stubs that fail loudly when called.";
  return invalid(std::move(message));
}

Expected<std::vector<std::string>> stub_device_only(llvm::Module& m, const std::vector<GuardFinding>& findings) {
  std::vector<std::string> stubbed;
  // Functions whose body is now a stub: only their signature may still name GPU memory.
  std::set<const llvm::Function*> stubs;
  for (const GuardFinding& finding : findings) {
    llvm::GlobalValue* gv = m.getNamedValue(finding.symbol);
    if (gv == nullptr) continue;  // already removed with an earlier finding
    auto* fn = llvm::dyn_cast<llvm::Function>(gv);
    if (fn != nullptr && fn->isIntrinsic()) {
      // An intrinsic cannot be called on the host at all: stub out each function that uses it.
      std::set<llvm::Function*> users;
      for (llvm::User* u : fn->users()) {
        if (auto* inst = llvm::dyn_cast<llvm::Instruction>(u)) users.insert(inst->getFunction());
      }
      for (llvm::Function* user : users) {
        if (!stubs.insert(user).second) continue;
        stub_out_body(m, *user);
        stubbed.push_back(user->getName().str() + " (uses " + finding.symbol + ")");
      }
      if (fn->use_empty()) fn->eraseFromParent();
      continue;
    }
    if (is_gpu_address_space(gv->getAddressSpace()) && !llvm::isa<llvm::GlobalVariable>(gv)) {
      return invalid("'" + finding.symbol + "' (" + finding.what + ") lives in GPU address space " +
                     std::to_string(gv->getAddressSpace()) +
                     ", which cannot be stubbed on the host; remove it from the host module");
    }
    std::string gpu_space = "GPU address space " + std::to_string(finding.address_space);
    if (finding.address_space != 0 && fn != nullptr && !fn->isDeclaration()) {
      // A host function that touches GPU memory becomes a stub of itself; its callers keep its ABI.
      if (stubs.insert(fn).second) {
        stub_out_body(m, *fn);
        stubbed.push_back(finding.symbol + " (uses " + gpu_space + ")");
      }
      continue;
    }
    llvm::FunctionType* type = nullptr;
    if (fn != nullptr) type = fn->getFunctionType();
    else if (llvm::isa<llvm::GlobalAlias>(gv) || llvm::isa<llvm::GlobalIFunc>(gv)) {
      type = llvm::dyn_cast<llvm::FunctionType>(gv->getValueType());
    }
    if (type == nullptr) {
      return invalid("'" + finding.symbol + "' (" + finding.what +
                     ") is device-only data, which cannot be stubbed on the host; remove it from the host module");
    }
    llvm::Function* stub = make_stub(m, type, finding.symbol);
    stubs.insert(stub);
    gv->replaceAllUsesWith(stub);
    gv->eraseFromParent();
    stubbed.push_back(finding.address_space == 0 ? finding.symbol : finding.symbol + " (uses " + gpu_space + ")");
  }
  auto left = find_device_only(m);
  std::erase_if(left, [&](const GuardFinding& f) {
    const llvm::Function* fn = m.getFunction(f.symbol);
    return f.address_space != 0 && fn != nullptr && stubs.contains(fn);
  });
  if (!left.empty()) {
    return make_error(ErrorCode::k_internal, "host guard: '" + left.front().symbol + "' is still referenced after stubbing");
  }
  return stubbed;
}

}  // namespace kcache::server
