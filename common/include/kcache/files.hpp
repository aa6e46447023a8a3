// Reading a whole file at once.
#pragma once

#include <filesystem>
#include <string>

namespace kcache {

// The bytes of the file at `path`: its size, then one read. A character at a time through
// istreambuf_iterator was most of the time in the launcher's own code (megabytes of preprocessed
// text each launch) and 20-45 ms of each daemon start under ASan (the bitcode libraries). Empty
// when it cannot be opened or read whole, or is empty.
std::string read_whole_file(const std::filesystem::path& path);

}  // namespace kcache
