#include "kcache/files.hpp"

#include <fstream>

namespace kcache {

std::string read_whole_file(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return {};
  std::streamoff size = f.tellg();
  if (size <= 0) return {};
  std::string bytes(static_cast<std::size_t>(size), '\0');
  f.seekg(0);
  if (!f.read(bytes.data(), size)) return {};
  return bytes;
}

}  // namespace kcache
