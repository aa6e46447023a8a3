#include "compile/device_symbols.hpp"

#include <llvm/IR/Constants.h>
#include <llvm/IR/GlobalVariable.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Metadata.h>
#include <llvm/IR/Module.h>

#include <cctype>
#include <sstream>
#include <vector>

#include "compile/llvm_common.hpp"
#include "kcache/rtlib.hpp"

namespace kcache::server {
namespace {

constexpr unsigned k_shared_address_space = 3;  // NVPTX: .shared

bool is_identifier_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%'; }

// The first PTX identifier in `text` that is not a directive (.global), a number (an alignment)
// or inside a parenthesised group (a return parameter): the declared name.
std::string declared_name(std::string_view text) {
  int depth = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth > 0 || !is_identifier_start(c) || (i > 0 && (text[i - 1] == '.' || std::isalnum(static_cast<unsigned char>(text[i - 1]))))) {
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) || text[end] == '_' ||
                                 text[end] == '$' || text[end] == '%')) {
      ++end;
    }
    return std::string(text.substr(i, end - i));
  }
  return {};
}

// Globals that !nvvm.annotations marks as texture, surface or sampler references.
std::set<const llvm::GlobalValue*> texture_references(const llvm::Module& m) {
  std::set<const llvm::GlobalValue*> out;
  const llvm::NamedMDNode* annotations = m.getNamedMetadata("nvvm.annotations");
  if (annotations == nullptr) return out;
  for (const llvm::MDNode* node : annotations->operands()) {
    if (node->getNumOperands() < 3) continue;
    auto* gv = llvm::mdconst::dyn_extract_or_null<llvm::GlobalValue>(node->getOperand(0));
    for (unsigned i = 1; gv != nullptr && i + 1 < node->getNumOperands(); i += 2) {
      auto* key = llvm::dyn_cast_or_null<llvm::MDString>(node->getOperand(i));
      if (key != nullptr && (key->getString() == "texture" || key->getString() == "surface" ||
                             key->getString() == "sampler")) {
        out.insert(gv);
      }
    }
  }
  return out;
}

// Whether an undefined `gv` is supplied at link or load time (see the header).
bool legal_undefined(const llvm::GlobalValue& gv, const std::set<const llvm::GlobalValue*>& textures,
                     const std::set<std::string>& defined_elsewhere) {
  if (const auto* f = llvm::dyn_cast<llvm::Function>(&gv)) {
    // A real intrinsic, not merely an llvm.* name: an unknown one would reach codegen as a call.
    if (f->getIntrinsicID() != llvm::Intrinsic::not_intrinsic) return true;
    if (f->getName() == "__nvvm_reflect") return true;
    rtlib::Provider p = rtlib::provider_of(f->getName());
    if (p == rtlib::Provider::driver || p == rtlib::Provider::device_runtime) return true;
  }
  if (const auto* var = llvm::dyn_cast<llvm::GlobalVariable>(&gv)) {
    if (var->getAddressSpace() == k_shared_address_space) return true;  // dynamic shared memory
    if (textures.contains(var)) return true;
  }
  return defined_elsewhere.contains(gv.getName().str());
}

}  // namespace

PtxSymbols ptx_symbols(std::string_view ptx) {
  PtxSymbols out;
  std::istringstream lines{std::string(ptx)};
  for (std::string line; std::getline(lines, line);) {
    std::string_view l(line);
    std::size_t start = l.find_first_not_of(" \t");
    if (start == std::string_view::npos) continue;
    l = l.substr(start);
    bool external = l.starts_with(".extern");
    if (!external && !l.starts_with(".visible") && !l.starts_with(".weak")) continue;
    bool function = l.find(".func") != std::string_view::npos || l.find(".entry") != std::string_view::npos;
    std::string name = declared_name(l);
    if (name.empty()) continue;
    if (!external) out.defined.insert(name);
    else if (function) out.external.insert(name);
  }
  return out;
}

bool ptx_uses_device_runtime(std::string_view ptx) {
  for (const std::string& name : ptx_symbols(ptx).external) {
    if (rtlib::provider_of(name) == rtlib::Provider::device_runtime) return true;
  }
  return false;
}

Expected<void> check_undefined_symbols(const llvm::Module& m, const std::set<std::string>& defined_elsewhere) {
  std::set<const llvm::GlobalValue*> textures = texture_references(m);
  std::vector<std::string> names, report;
  for (const llvm::GlobalValue& gv : m.global_values()) {
    if (!gv.isDeclaration() || gv.use_empty() || llvm::isa<llvm::GlobalAlias>(gv)) continue;
    if (legal_undefined(gv, textures, defined_elsewhere)) continue;
    std::vector<std::string> users = users_of(gv);
    names.push_back(gv.getName().str());
    report.push_back(gv.getName().str() + ": " + (users.empty() ? "unused" : "used by " + join(users, ", ")));
  }
  if (names.empty()) return {};
  std::string count = names.size() == 1 ? "1 undefined symbol remains" : std::to_string(names.size()) + " undefined symbols remain";
  return make_error(ErrorCode::k_invalid_argument,
                    count + " after linking rtlib and libdevice: " + join_capped(names, 600) +
                        ". Define them, or send the modules that do with this one (kcache compile a.bc b.bc); left "
                        "undefined may be only dynamic shared memory (extern __shared__), texture references, and "
                        "what the CUDA driver (vprintf, malloc, free, __assertfail) and device runtime (cuda*) provide",
                    std::move(report));
}

}  // namespace kcache::server
