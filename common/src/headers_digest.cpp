#include "kcache/headers_digest.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string_view>
#include <utility>

#include "kcache/sha256.hpp"

namespace kcache {
namespace {

// One regular file under a header folder: its path relative to that folder, size and mtime.
struct HeaderStat {
  std::string path;
  std::uint64_t size = 0;
  std::int64_t mtime = 0;  // as last_write_time() counts it (the file clock), so keys stay what they were
};

// Every regular file under the open folder `fd` (closed here), as recursive_directory_iterator
// finds them: symbolic links to files count (their target's size and mtime), links to folders
// are not entered. fstatat on the folder's descriptor and d_type: no path is resolved twice and
// nothing is allocated but the names, which matters at every daemon and worker start (2,000
// headers, several times slower under the sanitizers with std::filesystem's paths).
void walk_headers(int fd, const std::string& prefix, std::vector<HeaderStat>& out) {
  DIR* dir = fdopendir(fd);
  if (dir == nullptr) {
    ::close(fd);
    return;
  }
  while (const dirent* e = readdir(dir)) {
    std::string_view name(e->d_name);
    if (name == "." || name == "..") continue;
    bool folder = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {
      struct stat lst {};
      folder = fstatat(dirfd(dir), e->d_name, &lst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(lst.st_mode);
    }
    if (folder) {
      int sub = openat(dirfd(dir), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (sub >= 0) walk_headers(sub, prefix + std::string(name) + "/", out);
      continue;
    }
    struct stat st {};
    if (fstatat(dirfd(dir), e->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
    auto mtime = std::chrono::file_clock::from_sys(std::chrono::sys_time<std::chrono::nanoseconds>(
                                                       std::chrono::seconds(st.st_mtim.tv_sec) +
                                                       std::chrono::nanoseconds(st.st_mtim.tv_nsec)))
                     .time_since_epoch()
                     .count();
    out.push_back({prefix + std::string(name), static_cast<std::uint64_t>(st.st_size), static_cast<std::int64_t>(mtime)});
  }
  closedir(dir);
}

// Whether each folder from `outer` down to `outer`/`inner` is a folder and no link to one: the
// walk of `outer` entered them all, so it found what a walk of `inner` would.
bool real_folders(const std::filesystem::path& outer, const std::string& inner) {
  std::filesystem::path at = outer;
  for (const auto& part : std::filesystem::path(inner)) {
    at /= part;
    struct stat st {};
    if (::lstat(at.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  }
  return true;
}

}  // namespace

std::string cuda_headers_digest(const std::vector<std::filesystem::path>& include_dirs) {
  // The toolkit's folders nest (include/cccl lies in include): a folder inside one already walked
  // takes its files from that walk instead of reading them again. Each folder's files still count
  // once per folder, named from it, so the digest (and every key) is what it always was.
  std::vector<std::pair<std::filesystem::path, std::vector<HeaderStat>>> walked;
  std::vector<std::string> lines;
  for (const std::filesystem::path& dir : include_dirs) {
    std::vector<HeaderStat> files;
    bool found = false;
    for (const auto& [outer, outer_files] : walked) {
      std::string inner = dir.lexically_relative(outer).generic_string();
      if (inner.empty() || inner == "." || inner.starts_with("..") || !real_folders(outer, inner)) continue;
      std::string prefix = inner + "/";
      for (const HeaderStat& f : outer_files) {
        if (f.path.starts_with(prefix)) files.push_back({f.path.substr(prefix.size()), f.size, f.mtime});
      }
      found = true;
      break;
    }
    if (!found) {
      int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd >= 0) walk_headers(fd, "", files);
    }
    std::string name = dir.filename().string() + "/";
    for (const HeaderStat& f : files) {
      lines.push_back(name + f.path + " " + std::to_string(f.size) + " " + std::to_string(f.mtime));
    }
    walked.emplace_back(dir, std::move(files));
  }
  std::sort(lines.begin(), lines.end());
  Sha256 h;
  for (const std::string& line : lines) {
    h.update(line);
    h.update(std::string_view("\n"));
  }
  return to_hex(h.finish());
}

}  // namespace kcache
