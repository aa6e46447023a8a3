#include "launcher/tool_identity.hpp"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "endpoint.hpp"
#include "kcache/step.hpp"

namespace kcache::launcher {

namespace fs = std::filesystem;

std::string file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) +
         " " + std::to_string(st.st_ino) + " " + path;
}

Expected<Digest> cached_digest(const std::string& identity, const std::function<Expected<Digest>()>& compute) {
  static std::recursive_mutex mutex;  // one launch's steps ask from several threads
  std::lock_guard lock(mutex);
  fs::path table = state_dir().empty() ? fs::path() : state_dir() / "tools";
  if (!table.empty()) {
    std::ifstream in(table);
    for (std::string line; std::getline(in, line);) {
      if (line.size() > 65 && line.compare(65, std::string::npos, identity) == 0) {
        if (auto d = digest_from_hex(line.substr(0, 64))) return *d;
      }
    }
  }
  auto digest = compute();
  if (!digest) return digest;
  if (!table.empty()) {
    std::error_code ec;
    fs::create_directories(table.parent_path(), ec);
    std::ofstream(table, std::ios::app) << to_hex(*digest) << " " << identity << "\n";
  }
  return digest;
}

Expected<Digest> file_digest(const std::string& path) {
  std::string identity = file_identity(path);
  if (identity.empty()) return make_error(ErrorCode::k_not_found, "cannot find " + path);
  return cached_digest(identity, [&]() -> Expected<Digest> {
    auto digest = sha256_file(path);
    if (!digest) return make_error(ErrorCode::k_not_found, "cannot read " + path);
    return *digest;
  });
}

Expected<Digest> host_driver_identity(const std::string& driver, const std::string& proper) {
  std::string identity = file_identity(driver);
  if (identity.empty()) return make_error(ErrorCode::k_not_found, "cannot find " + driver);
  // Run the driver once per change of it: a compiler upgrade replaces the driver too.
  return cached_digest("host " + proper + " " + identity,
                       [&]() { return kcache::host_compiler_identity(driver, proper, file_digest); });
}

}  // namespace kcache::launcher
