// Writes a bundle (kcache/bundle.hpp's layout) from the daemon's compile replies: each module's
// images as its reply comes, then the index, last, so a precompile that fails leaves no index.
#pragma once

#include <filesystem>
#include <string>

#include "kcache/bundle.hpp"
#include "kcache/v1/kcache.pb.h"

namespace kcache::cli {

class BundleWriter {
 public:
  // Makes DIR and DIR/images; fails (k_exit_error) when it cannot.
  explicit BundleWriter(std::filesystem::path dir);

  // Writes the images of `response`, the compile of manifest module `module` for `side`, to
  // images/KEY.ARCH.EXT; returns its index entry. The key and archs come from the daemon's reply:
  // each must be a plain file name part, checked before anything is written (k_exit_error).
  // Safe to call from several threads at once.
  BundleEntry write_images(const std::string& module, Side side, const v1::CompileResponse& response) const;

  // Writes DIR/index.json.
  void write_index(const BundleIndex& index) const;

 private:
  std::filesystem::path m_dir;
};

}  // namespace kcache::cli
