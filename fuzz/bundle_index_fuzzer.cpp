// libFuzzer target: the bundle index parser (client/src/bundle.cpp, parse_bundle_index). Any
// input must end in an index or a clean Error, and an accepted index must name only files under
// images/ with plain names, keys and digests of 64 hex digits, and kinds of the entry's side.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kcache/bundle.hpp"
#include "file_names.hpp"

namespace {

bool is_hex64(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto index = kcache::parse_bundle_index(bytes);
  if (!index) {
    if (!index.error().message.starts_with("bundle index ")) __builtin_trap();
    return 0;
  }
  for (const kcache::BundleEntry& e : index->entries) {
    if (!is_hex64(e.key)) __builtin_trap();
    for (const kcache::BundleImage& im : e.images) {
      std::string_view file = im.file;
      if (!file.starts_with("images/") || file.find('/', 7) != std::string_view::npos ||
          file.find("..") != std::string_view::npos || file.find('\0') != std::string_view::npos) {
        __builtin_trap();
      }
      if (!is_hex64(im.sha256) || kcache::kind_side(im.id.kind) != e.side) __builtin_trap();
      if (!kcache::is_safe_file_name_part(im.id.arch)) __builtin_trap();
    }
  }
  return 0;
}
