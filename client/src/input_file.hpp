// Files a client reads because a person or another program named them: modules and the headers
// they include, manifests, bundle indexes and bundle images. Each is read as a regular file
// through one descriptor, and never past the limit it is allowed: a FIFO, a device (/dev/zero),
// a folder or a file larger than its limit is refused at once, not read until memory runs out.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "kcache/expected.hpp"

namespace kcache {

struct InputLimit {
  std::uint64_t bytes = 0;  // the most the file may hold
  std::string source;       // where the limit comes from, for messages: "kcached's --max-module-size"
};

// The bytes of the regular file `path` (symlinks followed). A path that is not a regular file is
// never opened (opening a device can act); the file is opened without blocking (a FIFO swapped in
// cannot stall it) and checked again through its descriptor. Every message begins "cannot read
// PATH: ". NOT_FOUND when it does not exist; INVALID_ARGUMENT when it is not a regular file ("it
// is a FIFO", "a character device", "a folder", ...) or cannot be opened or read;
// RESOURCE_EXHAUSTED, naming its size, the limit and `limit.source`, when it holds more than
// `limit.bytes`: checked before reading, and by reading at most one byte more (a file that grows).
Expected<std::string> read_input_file(const std::filesystem::path& path, const InputLimit& limit);

}  // namespace kcache
