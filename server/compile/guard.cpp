#include "compile/guard.hpp"

#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/GlobalAlias.h>
#include <llvm/IR/GlobalIFunc.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Instructions.h>

#include <set>

#include "compile/llvm_common.hpp"
#include "kcache/rtlib.hpp"

namespace kcache::server {
namespace {

// Address spaces that mean GPU memory (NVPTX and AMDGPU: 1 global, 3 shared, 4 constant,
// 5 local); host code in them is meaningless.
bool is_gpu_address_space(unsigned as) { return as >= 1 && as <= 5; }

std::string describe(std::string_view name) {
  for (const auto& f : rtlib::runtime_functions()) {
    if (f.name == name) return "rtlib function";
  }
  if (name.starts_with("llvm.nvvm.")) return "NVVM intrinsic";
  if (name.starts_with("llvm.amdgcn.")) return "AMDGPU intrinsic";
  return "reserved gpu_ name";
}

GuardFinding finding_for(const llvm::GlobalValue& gv, std::string what) {
  return GuardFinding{gv.getName().str(), std::move(what), users_of(gv)};
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
  for (const llvm::GlobalValue& gv : m.global_values()) {
    if (rtlib::is_device_only_symbol(gv.getName())) {
      out.push_back(finding_for(gv, describe(gv.getName())));
    } else if (const auto* var = llvm::dyn_cast<llvm::GlobalVariable>(&gv);
               var != nullptr && is_gpu_address_space(var->getAddressSpace())) {
      out.push_back(finding_for(gv, "variable in GPU address space " + std::to_string(var->getAddressSpace())));
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
        stub_out_body(m, *user);
        stubbed.push_back(user->getName().str() + " (uses " + finding.symbol + ")");
      }
      if (fn->use_empty()) fn->eraseFromParent();
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
    gv->replaceAllUsesWith(stub);
    gv->eraseFromParent();
    stubbed.push_back(finding.symbol);
  }
  if (auto left = find_device_only(m); !left.empty()) {
    return make_error(ErrorCode::k_internal, "host guard: '" + left.front().symbol + "' is still referenced after stubbing");
  }
  return stubbed;
}

}  // namespace kcache::server
