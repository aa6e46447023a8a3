#include "launcher/local_objects.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

#include "endpoint.hpp"
#include "kcache/job.hpp"

namespace kcache::launcher {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view k_magic = "kcache-local-object 1\n";
constexpr std::uint64_t k_default_max = 1ULL << 30;

}  // namespace

LocalObjects LocalObjects::open() {
  std::uint64_t max = k_default_max;
  if (const char* size = std::getenv("KCACHE_LOCAL_OBJECTS_SIZE"); size != nullptr && *size != '\0') {
    max = parse_size(size).value_or(k_default_max);
  }
  fs::path state = state_dir();
  return LocalObjects(state.empty() || max == 0 ? fs::path() : state / "objects", max);
}

std::optional<LocalObject> LocalObjects::get(const Key& key) const {
  if (m_folder.empty()) return std::nullopt;
  fs::path path = m_folder / key.hex();
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!bytes.starts_with(k_magic)) return std::nullopt;
  std::size_t line_end = bytes.find('\n', k_magic.size());
  if (line_end == std::string::npos) return std::nullopt;
  std::uint64_t sizes[3] = {};
  std::string_view header(bytes.data() + k_magic.size(), line_end - k_magic.size());
  for (std::uint64_t& size : sizes) {
    std::size_t end = std::min(header.find(' '), header.size());
    std::string_view number = header.substr(0, end);
    if (number.empty() || number.size() > 12 || number.find_first_not_of("0123456789") != std::string_view::npos) {
      return std::nullopt;
    }
    size = std::stoull(std::string(number));
    header.remove_prefix(std::min(header.size(), end + 1));
  }
  std::size_t at = line_end + 1;
  if (sizes[0] + sizes[1] + sizes[2] != bytes.size() - at || sizes[0] == 0) return std::nullopt;  // cut short: a miss
  LocalObject out{bytes.substr(at, sizes[0]), bytes.substr(at + sizes[0], sizes[1]),
                  bytes.substr(at + sizes[0] + sizes[1], sizes[2])};
  std::error_code ec;
  fs::last_write_time(path, fs::file_time_type::clock::now(), ec);  // read now: kept longest
  return out;
}

void LocalObjects::put(const Key& key, std::string_view object, std::string_view out, std::string_view err) const {
  if (m_folder.empty() || object.empty()) return;
  std::error_code ec;
  fs::create_directories(m_folder, ec);
  fs::path path = m_folder / key.hex();
  fs::path staged = path;
  staged += ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream file(staged, std::ios::binary | std::ios::trunc);
    file << k_magic << object.size() << ' ' << out.size() << ' ' << err.size() << '\n';
    file.write(object.data(), static_cast<std::streamsize>(object.size()));
    file.write(out.data(), static_cast<std::streamsize>(out.size()));
    file.write(err.data(), static_cast<std::streamsize>(err.size()));
    if (!file) {
      fs::remove(staged, ec);
      return;
    }
  }
  fs::rename(staged, path, ec);
  if (ec) fs::remove(staged, ec);
  trim();
}

void LocalObjects::trim() const {
  struct File {
    fs::path path;
    fs::file_time_type time;
    std::uint64_t size;
  };
  std::vector<File> files;
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(m_folder, ec)) {
    std::error_code e;
    std::uint64_t size = entry.file_size(e);
    if (e) continue;
    files.push_back({entry.path(), entry.last_write_time(e), size});
    total += size;
  }
  if (total <= m_max) return;
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.time < b.time; });
  for (const File& f : files) {
    if (total <= m_max / 10 * 9) break;
    std::error_code e;
    if (fs::remove(f.path, e)) total -= f.size;
  }
}

}  // namespace kcache::launcher
