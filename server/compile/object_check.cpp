#include "compile/object_check.hpp"

#include <llvm/Object/ObjectFile.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>

#include <string>
#include <vector>

#include "compile/llvm_common.hpp"
#include "kcache/rtlib.hpp"

namespace kcache::server {

Expected<void> check_host_object(std::string_view object) {
  llvm::MemoryBufferRef buffer(llvm::StringRef(object.data(), object.size()), "host.o");
  auto file = llvm::object::ObjectFile::createObjectFile(buffer);
  if (!file) {
    return make_error(ErrorCode::k_internal,
                      "refusing to store a host image that is not an object file: " + llvm::toString(file.takeError()));
  }
  std::vector<std::string> offending;
  for (const llvm::object::SymbolRef& symbol : (*file)->symbols()) {
    auto name = symbol.getName();
    if (!name) {
      llvm::consumeError(name.takeError());
      continue;
    }
    if (!rtlib::is_device_only_symbol(*name)) continue;
    auto flags = symbol.getFlags();
    bool undefined = flags && (*flags & llvm::object::SymbolRef::SF_Undefined);
    if (!flags) llvm::consumeError(flags.takeError());
    offending.push_back(name->str() + (undefined ? " (referenced)" : " (defined)"));
  }
  if (offending.empty()) return {};
  return make_error(ErrorCode::k_internal,
                    "refusing to store a host entry whose object names device-only symbols: " + join(offending, ", "));
}

}  // namespace kcache::server
