// Precompiled bundles: the images of a set of kernels for a set of GPUs, written by
// `kcache precompile` and served with no daemon at all. Layout (format kcache-bundle-1):
//   DIR/index.json      {"format", "fingerprint", "cuda_version", "driver_version",
//                        "entries": [{"module", "key", "side",
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

#include "kcache/driver.hpp"
#include "kcache/expected.hpp"
#include "kcache/job.hpp"

namespace kcache {

inline constexpr std::string_view k_bundle_format = "kcache-bundle-1";
// The most bytes an index.json may hold (about 250 bytes an image).
inline constexpr std::uint64_t k_max_bundle_index_bytes = 256ULL << 20;

struct BundleImage {
  ImageRequest id;  // arch, kind
  std::uint64_t size = 0;
  std::string sha256;
  std::string file;  // relative to the bundle folder
  std::vector<std::string> kernels;
  std::vector<std::pair<std::string, std::string>> lowered_names;  // CUDA C++: (name expression, lowered)
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
  CudaVersion cuda_version = 0;    // the toolkit that made its cubins (13000); 0: unknown
  CudaVersion driver_version = 0;  // the driver it was precompiled for (--driver); 0: none stated
};

Expected<void> write_bundle_index(const std::filesystem::path& dir, const BundleIndex& index);

// Parses and checks an index's bytes, with no file access (fuzzed: fuzz/bundle_index_fuzzer.cpp);
// INVALID_ARGUMENT, beginning "bundle index ", naming the first bad field and its position.
Expected<BundleIndex> parse_bundle_index(std::string_view text);

class Bundle {
 public:
  // Reads DIR/index.json, a regular file of at most k_max_bundle_index_bytes; NOT_FOUND when it is
  // absent, INVALID_ARGUMENT when it is not a kcache bundle (or not a regular file, or too large).
  static Expected<Bundle> open(const std::filesystem::path& dir);

  const BundleIndex& index() const { return m_index; }

  struct Found {
    BundleImage image;
    std::string data;
    bool needs_jit = false;
  };
  // The best image of `key` for `arch` by the same rules as the daemon's Fetch, read and checked
  // against the index's size and digest (a mismatch is DATA_LOSS-like: refused as INTERNAL, naming
  // the file; a file larger than the index says is refused unread). An image file that is not a
  // regular file, or is missing, is INVALID_ARGUMENT.
  // With `driver` (a CUDA version; 0: none stated), only an image that driver loads: no cubin
  // from a toolkit of a newer major version, no PTX above the ISA it JITs.
  Expected<Found> fetch(const std::string& key, const std::string& arch, std::optional<ImageKind> kind = {},
                        CudaVersion driver = 0) const;

 private:
  // The file of `image`, read and checked against the index (size, digest, inside the bundle).
  Expected<std::string> read_image(const BundleImage& image) const;

  std::filesystem::path m_dir;
  BundleIndex m_index;
};

}  // namespace kcache
