// Precompiled bundles: the images of a set of kernels for a set of GPUs, written by
// `kcache precompile` and served with no daemon at all. Layout (format kcache-bundle-1):
//   DIR/index.json      {"format", "fingerprint", "entries": [{"module", "key", "side",
//                        "images": [{"arch", "kind", "size", "sha256", "file", "kernels"}]}]}
//   DIR/images/KEY.ARCH.KIND   the image bytes
// The index is checked field by field when read (types, enums, hex digests, image files only
// under images/; fields it does not know are ignored); a bundle whose file digest or size does
// not match its index is refused.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/expected.hpp"
#include "kcache/job.hpp"

namespace kcache {

inline constexpr std::string_view k_bundle_format = "kcache-bundle-1";

struct BundleImage {
  ImageRequest id;  // arch, kind
  std::uint64_t size = 0;
  std::string sha256;
  std::string file;  // relative to the bundle folder
  std::vector<std::string> kernels;
};

struct BundleEntry {
  std::string module;  // the manifest's path for it
  std::string key;
  Side side = Side::device;
  std::vector<BundleImage> images;
};

struct BundleIndex {
  std::string fingerprint;
  std::vector<BundleEntry> entries;
};

Expected<void> write_bundle_index(const std::filesystem::path& dir, const BundleIndex& index);

// Parses and checks an index's bytes, with no file access (fuzzed: fuzz/bundle_index_fuzzer.cpp);
// INVALID_ARGUMENT, beginning "bundle index ", naming the first bad field and its position.
Expected<BundleIndex> parse_bundle_index(std::string_view text);

class Bundle {
 public:
  // Reads DIR/index.json; INVALID_ARGUMENT when it is not a kcache bundle.
  static Expected<Bundle> open(const std::filesystem::path& dir);

  const BundleIndex& index() const { return m_index; }

  struct Found {
    BundleImage image;
    std::string data;
    bool needs_jit = false;
  };
  // The best image of `key` for `arch` by the same rules as the daemon's Fetch, read and checked
  // against the index's digest (a mismatch is DATA_LOSS-like: refused as INTERNAL, naming the file).
  Expected<Found> fetch(const std::string& key, const std::string& arch, std::optional<ImageKind> kind = {}) const;

 private:
  std::filesystem::path m_dir;
  BundleIndex m_index;
};

}  // namespace kcache
