#include "launcher/local_stats.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>

#include "endpoint.hpp"

namespace kcache::launcher {

namespace fs = std::filesystem;

void LocalStats::add(std::string name) {
  for (char& c : name) {
    if (c == ' ' || c == '\n' || c == '\t') c = '_';
  }
  std::lock_guard lock(m_mutex);
  ++m_counts[name];
}

void LocalStats::write() {
  std::lock_guard lock(m_mutex);
  if (m_counts.empty()) return;
  fs::path dir = state_dir();
  if (dir.empty()) return;
  std::error_code ec;
  fs::create_directories(dir, ec);
  int fd = ::open((dir / "launcher-stats").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;
  if (::flock(fd, LOCK_EX) == 0) {
    std::string text;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
    std::map<std::string, unsigned long long> counts;
    std::istringstream in(text);
    std::string name;
    unsigned long long count = 0;
    while (in >> name >> count) counts[name] += count;
    for (const auto& [n, c] : m_counts) counts[n] += c;
    std::string out;
    for (const auto& [n, c] : counts) out += n + " " + std::to_string(c) + "\n";
    if (::ftruncate(fd, 0) == 0 && ::lseek(fd, 0, SEEK_SET) == 0) {
      [[maybe_unused]] ssize_t w = ::write(fd, out.data(), out.size());
    }
  }
  ::close(fd);
  m_counts.clear();
}

}  // namespace kcache::launcher
