#include "input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace kcache {
namespace {

// What a file that is not a regular one is, as a message says it.
std::string file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "of an unknown type";
}

// Closes its descriptor when it goes.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : m_fd(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (m_fd >= 0) ::close(m_fd);
  }
  int get() const { return m_fd; }

 private:
  int m_fd;
};

}  // namespace

Expected<std::string> read_input_file(const std::filesystem::path& path, const InputLimit& limit) {
  auto refuse = [&](ErrorCode code, const std::string& why) {
    return make_error(code, "cannot read " + path.string() + ": " + why);
  };
  auto not_regular = [&](mode_t mode) {
    return refuse(ErrorCode::k_invalid_argument, "it is " + file_type_name(mode) + ", not a regular file");
  };
  auto too_large = [&](std::uint64_t size, std::string_view at_least) {
    return refuse(ErrorCode::k_resource_exhausted, "it holds " + std::string(at_least) + std::to_string(size) +
                                                       " bytes, more than the " + std::to_string(limit.bytes) +
                                                       " allowed by " + limit.source);
  };
  auto failed = [&](int error) {
    return refuse(error == ENOENT || error == ENOTDIR ? ErrorCode::k_not_found : ErrorCode::k_invalid_argument,
                  std::strerror(error));
  };
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return failed(errno);
  if (!S_ISREG(st.st_mode)) return not_regular(st.st_mode);
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (fd.get() < 0) return failed(errno);
  if (::fstat(fd.get(), &st) != 0) return failed(errno);
  if (!S_ISREG(st.st_mode)) return not_regular(st.st_mode);  // swapped since the stat
  auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > limit.bytes) return too_large(size, "");
  // One byte past the limit is room enough to see that a file grew beyond it while read.
  const std::uint64_t most = std::min<std::uint64_t>(limit.bytes, std::string().max_size() - 1) + 1;
  std::string data(std::min(size + 1, most), '\0');
  std::size_t at = 0;
  for (;;) {
    if (at == data.size()) {
      if (at >= most) return too_large(at, "at least ");
      data.resize(std::min<std::uint64_t>(most, 2 * data.size()));
    }
    ssize_t n = ::read(fd.get(), data.data() + at, data.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return failed(errno);
    if (n == 0) break;
    at += static_cast<std::size_t>(n);
  }
  data.resize(at);
  return data;
}

}  // namespace kcache
