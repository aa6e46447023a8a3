// The store's last line of defence: reads a host object's symbol table (llvm::object) and
// refuses one that defines or references a device-only symbol. Independent of the guard.
#pragma once

#include <string_view>

#include "kcache/expected.hpp"

namespace kcache::server {

// OK when `object` is an object file naming no device-only symbol; INTERNAL otherwise, listing
// each offending symbol.
Expected<void> check_host_object(std::string_view object);

}  // namespace kcache::server
