#include "kcache/search_path.hpp"

#include <unistd.h>

namespace kcache {

std::string search_path(std::string_view name, std::string_view path,
                        const std::function<bool(const std::filesystem::path&)>& skip) {
  if (name.empty()) return {};
  if (name.find('/') != std::string_view::npos) return std::string(name);
  for (std::size_t begin = 0; begin <= path.size();) {
    std::size_t end = std::min(path.find(':', begin), path.size());
    std::filesystem::path folder = end == begin ? std::filesystem::path(".") : std::filesystem::path(path.substr(begin, end - begin));
    begin = end + 1;
    std::filesystem::path candidate = folder / name;
    std::error_code ec;
    if (::access(candidate.c_str(), X_OK) != 0 || !std::filesystem::is_regular_file(candidate, ec)) continue;
    if (skip && skip(candidate)) continue;
    return candidate.string();
  }
  return {};
}

}  // namespace kcache
