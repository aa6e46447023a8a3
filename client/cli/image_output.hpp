// The images a command answers with, for both kcache executables: written where the output flags
// say, and shown as a table.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cli_common.hpp"
#include "kcache/job.hpp"

namespace kcache::cli {

// One image as the table shows it.
struct ImageLine {
  std::string arch;
  ImageKind kind = ImageKind::ptx;
  std::uint64_t size = 0;
  std::string sha256;  // hex
  bool needs_jit = false;
};

// Writes images per the output flags (-o FILE: exactly one; --out-dir: DIR/ARCH.EXT); returns
// each one's path (empty when not written).
std::vector<std::string> write_images(const OutputFlags& out, const std::vector<ImageLine>& images,
                                      const std::vector<std::string_view>& data);

// "HEADER" then one line per image: arch, kind, size, digest, and where it was written.
void print_images(const std::string& header, const std::vector<ImageLine>& images,
                  const std::vector<std::string>& paths);

// One line per symbol a host object's stubs stand for.
void print_stubbed(const std::vector<std::string>& symbols);

}  // namespace kcache::cli
