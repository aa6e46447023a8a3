#include "kcache/bundle.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kcache/select.hpp"
#include "kcache/sha256.hpp"

namespace kcache {

using json = nlohmann::json;

Expected<void> write_bundle_index(const std::filesystem::path& dir, const BundleIndex& index) {
  json entries = json::array();
  for (const BundleEntry& e : index.entries) {
    json images = json::array();
    for (const BundleImage& im : e.images) {
      images.push_back({{"arch", im.id.arch}, {"kind", kind_name(im.id.kind)}, {"size", im.size},
                        {"sha256", im.sha256}, {"file", im.file}, {"kernels", im.kernels}});
    }
    entries.push_back({{"module", e.module}, {"key", e.key}, {"side", side_name(e.side)}, {"images", images}});
  }
  json doc = {{"format", k_bundle_format}, {"fingerprint", index.fingerprint}, {"entries", entries}};
  std::filesystem::path tmp = dir / "index.json.tmp";
  {
    std::ofstream f(tmp);
    f << doc.dump(1) << '\n';
    if (!f) return make_error(ErrorCode::k_internal, "cannot write " + tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, dir / "index.json", ec);
  if (ec) return make_error(ErrorCode::k_internal, "cannot write " + (dir / "index.json").string() + ": " + ec.message());
  return {};
}

namespace {

// Image files of a bundle are images/NAME, as `kcache precompile` writes them: no other folder,
// no "..", no NUL, so an index can never name a file outside the bundle.
bool is_bundle_image_path(const std::string& file) {
  constexpr std::string_view k_folder = "images/";
  if (!file.starts_with(k_folder)) return false;
  std::string_view name = std::string_view(file).substr(k_folder.size());
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos && name.find("..") == std::string_view::npos;
}

}  // namespace

Expected<Bundle> Bundle::open(const std::filesystem::path& dir) {
  std::ifstream f(dir / "index.json");
  if (!f) return make_error(ErrorCode::k_not_found, "no bundle at " + dir.string() + " (no index.json)");
  Bundle bundle;
  bundle.m_dir = dir;
  try {
    json doc = json::parse(f);
    if (doc.value("format", "") != k_bundle_format) {
      return make_error(ErrorCode::k_invalid_argument, (dir / "index.json").string() + " is not a " +
                                                           std::string(k_bundle_format) + " index");
    }
    bundle.m_index.fingerprint = doc.value("fingerprint", "");
    for (const json& e : doc.at("entries")) {
      BundleEntry entry;
      entry.module = e.value("module", "");
      entry.key = e.at("key").get<std::string>();
      entry.side = parse_side(e.value("side", "device")).value_or(Side::device);
      for (const json& im : e.at("images")) {
        auto kind = parse_kind(im.at("kind").get<std::string>());
        if (!kind) return make_error(ErrorCode::k_invalid_argument, "bundle index: unknown image kind");
        std::string file = im.at("file").get<std::string>();
        if (!is_bundle_image_path(file)) {
          return make_error(ErrorCode::k_invalid_argument,
                            "bundle index: image file '" + file.substr(0, 200) +
                                "' is not images/NAME (a name without '/', NUL or '..'): refusing a path outside the bundle");
        }
        entry.images.push_back(BundleImage{{im.at("arch").get<std::string>(), *kind}, im.at("size").get<std::uint64_t>(),
                                           im.at("sha256").get<std::string>(), file,
                                           im.value("kernels", std::vector<std::string>{})});
      }
      bundle.m_index.entries.push_back(std::move(entry));
    }
  } catch (const std::exception& e) {
    return make_error(ErrorCode::k_invalid_argument, "cannot read bundle index " + (dir / "index.json").string() + ": " + e.what());
  }
  return bundle;
}

Expected<Bundle::Found> Bundle::fetch(const std::string& key, const std::string& arch,
                                      std::optional<ImageKind> kind) const {
  for (const BundleEntry& e : m_index.entries) {
    if (e.key != key) continue;
    std::vector<ImageRequest> candidates;
    for (const BundleImage& im : e.images) candidates.push_back(im.id);
    auto selected = select_for_side(e.side, candidates, arch, kind);
    if (!selected) return selected.error();
    const std::optional<Selection>& chosen = *selected;
    if (!chosen) return make_error(ErrorCode::k_not_found, "the bundle has no image of " + key + " that runs on " + arch);
    const BundleImage& image = e.images[chosen->index];
    // The index was checked when opened; a symlink inside the bundle could still point out of it.
    std::error_code ec;
    auto real = std::filesystem::weakly_canonical(m_dir / image.file, ec);
    auto root = std::filesystem::weakly_canonical(m_dir, ec);
    auto [stop, at] = std::mismatch(root.begin(), root.end(), real.begin(), real.end());
    if (ec || stop != root.end()) {
      return make_error(ErrorCode::k_invalid_argument,
                        "refusing " + (m_dir / image.file).string() + ": it resolves outside the bundle");
    }
    std::ifstream f(m_dir / image.file, std::ios::binary);
    std::ostringstream data;
    data << f.rdbuf();
    Found found{image, data.str(), chosen->needs_jit};
    if (!f || sha256_hex(found.data) != image.sha256) {
      return make_error(ErrorCode::k_internal, "refusing " + (m_dir / image.file).string() +
                                                   ": its SHA-256 does not match the bundle index (corrupt bundle)");
    }
    return found;
  }
  return make_error(ErrorCode::k_not_found, "key " + key + " is not in the bundle");
}

}  // namespace kcache
