// Reading a whole file at once.
#pragma once

#include <filesystem>
#include <string>

namespace kcache {

// The bytes of the file at `path`: its size, then one read (a character at a time through
// istreambuf_iterator cost the launcher most of its own CPU on megabytes of preprocessed text,
// and each daemon start 20-45 ms under ASan on the bitcode libraries). Empty when it cannot be
// opened or read whole, or is empty.
std::string read_whole_file(const std::filesystem::path& path);

}  // namespace kcache
