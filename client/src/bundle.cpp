#include "kcache/bundle.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <filesystem>
#include <fstream>

#include "json_fields.hpp"
#include "file_names.hpp"
#include "input_file.hpp"
#include "kcache/select.hpp"
#include "kcache/sha256.hpp"

namespace kcache {

using json = nlohmann::json;

Expected<void> write_bundle_index(const std::filesystem::path& dir, const BundleIndex& index) {
  json entries = json::array();
  for (const BundleEntry& e : index.entries) {
    json images = json::array();
    for (const BundleImage& im : e.images) {
      json image = {{"arch", im.id.arch}, {"kind", kind_name(im.id.kind)}, {"size", im.size},
                    {"sha256", im.sha256}, {"file", im.file}, {"kernels", im.kernels}};
      if (!im.lowered_names.empty()) {
        json names = json::object();
        for (const auto& [expression, lowered] : im.lowered_names) names[expression] = lowered;
        image["lowered_names"] = names;
      }
      images.push_back(std::move(image));
    }
    entries.push_back({{"module", e.module}, {"key", e.key}, {"side", side_name(e.side)}, {"images", images}});
  }
  json doc = {{"format", k_bundle_format}, {"fingerprint", index.fingerprint}, {"entries", entries}};
  if (index.cuda_version != 0) doc["cuda_version"] = index.cuda_version;
  if (index.driver_version != 0) doc["driver_version"] = index.driver_version;
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

using namespace json_fields;


// Image files of a bundle are images/NAME, as `kcache precompile` writes them: no other folder,
// no "..", no NUL, so an index can never name a file outside the bundle.
bool is_bundle_image_path(const std::string& file) {
  constexpr std::string_view k_folder = "images/";
  if (!file.starts_with(k_folder)) return false;
  std::string_view name = std::string_view(file).substr(k_folder.size());
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos && name.find("..") == std::string_view::npos;
}

BundleImage image_from(const json& im, const std::string& at, Side side) {
  require_object(im, at, std::nullopt);
  BundleImage out;
  out.id.arch = string_value(required(im, at, "arch"), child(at, "arch"), true, k_max_file_name_part);
  bool arch_ok = side == Side::device ? is_device_arch(out.id.arch) : is_safe_file_name_part(out.id.arch);
  if (!arch_ok) {
    expected(child(at, "arch"),
             side == Side::device ? "an SM arch such as \"sm_90\" or an AMD target ID such as \"gfx90a:xnack-\""
                                  : "a CPU arch such as \"x86_64\"",
             im.at("arch"));
  }
  out.id.kind = enum_value(required(im, at, "kind"), child(at, "kind"), parse_kind, kind_names());
  if (kind_side(out.id.kind) != side) {
    invalid(child(at, "kind"), "\"" + std::string(kind_name(out.id.kind)) + "\" is not a " +
                                   std::string(side_name(side)) + " image kind");
  }
  out.size = integer_value(required(im, at, "size"), child(at, "size"), 0, std::numeric_limits<std::int64_t>::max());
  out.sha256 = hex_value(required(im, at, "sha256"), child(at, "sha256"), 64);
  out.file = string_value(required(im, at, "file"), child(at, "file"), true);
  if (!is_bundle_image_path(out.file)) {
    invalid(child(at, "file"), quote_for_message(out.file) +
                                   " is not images/NAME (a name without '/', NUL or '..'): refusing a path outside the "
                                   "bundle");
  }
  out.kernels = strings_field(im, at, "kernels", 1u << 16);
  if (const json* names = find(im, "lowered_names")) {
    std::string here = child(at, "lowered_names");
    require_object(*names, here, std::nullopt);
    if (names->size() > k_max_name_expressions) invalid(here, "more than " + std::to_string(k_max_name_expressions) + " names");
    for (const auto& [expression, lowered] : names->items()) {
      out.lowered_names.emplace_back(expression, string_value(lowered, child(here, expression), true, 4096));
    }
  }
  return out;
}

BundleIndex index_from(const json& doc) {
  // Fields this version does not know are ignored, so a later one may add some without a new
  // format name; a change of meaning gets a new name, which this version refuses.
  require_object(doc, "", std::nullopt);
  const json& format = required(doc, "", "format");
  if (!format.is_string() || format.get_ref<const std::string&>() != k_bundle_format) {
    expected("format", "\"" + std::string(k_bundle_format) + "\"", format);
  }
  BundleIndex out;
  if (const json* f = find(doc, "fingerprint"); f != nullptr && !(f->is_string() && f->get_ref<const std::string&>().empty())) {
    out.fingerprint = hex_value(*f, "fingerprint", 64);
  }
  for (auto [name, field] : {std::pair{"cuda_version", &out.cuda_version}, std::pair{"driver_version", &out.driver_version}}) {
    const json* f = find(doc, name);
    if (f == nullptr) continue;
    std::uint64_t v = integer_value(*f, name, 0, 99990);
    if (!check_cuda_version(v)) expected(name, "a CUDA version as cuDriverGetVersion gives it (13000), or 0", *f);
    *field = static_cast<CudaVersion>(v);
  }
  const json& entries = array_value(required(doc, "", "entries"), "entries", 1u << 20);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    std::string at = element("entries", i);
    const json& e = entries[i];
    require_object(e, at, std::nullopt);
    BundleEntry entry;
    entry.module = string_field(e, at, "module", "");
    entry.key = hex_value(required(e, at, "key"), child(at, "key"), 64);
    if (const json* f = find(e, "side")) entry.side = enum_value(*f, child(at, "side"), parse_side, side_names());
    const json& images = array_value(required(e, at, "images"), child(at, "images"), 4096);
    for (std::size_t j = 0; j < images.size(); ++j) {
      entry.images.push_back(image_from(images[j], element(child(at, "images"), j), entry.side));
    }
    out.entries.push_back(std::move(entry));
  }
  return out;
}

}  // namespace

Expected<BundleIndex> parse_bundle_index(std::string_view text) {
  auto bad = [](const std::string& at, const std::string& message) {
    return make_error(ErrorCode::k_invalid_argument, "bundle index " + (at.empty() ? "" : at + ": ") + message);
  };
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    return bad("", std::string("is not valid JSON: ") + e.what());
  }
  try {
    return index_from(doc);
  } catch (const Invalid& e) {
    return bad(e.at, e.message);
  } catch (const json::exception& e) {
    return bad("", std::string("cannot be read: ") + e.what());  // every type is checked first: a bug
  }
}

Expected<Bundle> Bundle::open(const std::filesystem::path& dir) {
  std::filesystem::path path = dir / "index.json";
  auto text = read_input_file(path, {k_max_bundle_index_bytes, "kcache's limit on a bundle index"});
  if (!text && text.error().code == ErrorCode::k_not_found) {
    return make_error(ErrorCode::k_not_found, "no bundle at " + dir.string() + " (no index.json)");
  }
  if (!text) return make_error(ErrorCode::k_invalid_argument, text.error().message);
  auto index = parse_bundle_index(*text);
  if (!index) return make_error(index.error().code, path.string() + ": " + index.error().message);
  Bundle bundle;
  bundle.m_dir = dir;
  bundle.m_index = std::move(*index);
  return bundle;
}

Expected<std::string> Bundle::read_image(const BundleImage& image) const {
  // The index was checked when opened; a symlink inside the bundle could still point out of it.
  std::error_code ec;
  auto real = std::filesystem::weakly_canonical(m_dir / image.file, ec);
  auto root = std::filesystem::weakly_canonical(m_dir, ec);
  auto [stop, at] = std::mismatch(root.begin(), root.end(), real.begin(), real.end());
  if (ec || stop != root.end()) {
    return make_error(ErrorCode::k_invalid_argument,
                      "refusing " + (m_dir / image.file).string() + ": it resolves outside the bundle");
  }
  // Never more than the index records: a larger file is refused before it is read whole, as one
  // whose size or digest disagrees (INTERNAL, as kcache.h says); a FIFO, a device or a missing
  // file is INVALID_ARGUMENT.
  auto data = read_input_file(m_dir / image.file, {image.size, "the size the bundle index records"});
  if (!data) {
    bool larger = data.error().code == ErrorCode::k_resource_exhausted;
    return make_error(larger ? ErrorCode::k_internal : ErrorCode::k_invalid_argument,
                      data.error().message + " (corrupt bundle)");
  }
  if (data->size() != image.size) {
    return make_error(ErrorCode::k_internal, "refusing " + (m_dir / image.file).string() + ": it holds " +
                                                 std::to_string(data->size()) + " bytes; the bundle index records " +
                                                 std::to_string(image.size) + " (corrupt bundle)");
  }
  if (sha256_hex(*data) != image.sha256) {
    return make_error(ErrorCode::k_internal, "refusing " + (m_dir / image.file).string() +
                                                 ": its SHA-256 does not match the bundle index (corrupt bundle)");
  }
  return std::move(*data);
}

Expected<Bundle::Found> Bundle::fetch(const std::string& key, const std::string& arch, std::optional<ImageKind> kind,
                                      CudaVersion driver) const {
  if (auto ok = check_cuda_version(driver); !ok) return ok.error();
  for (const BundleEntry& e : m_index.entries) {
    if (e.key != key) continue;
    std::vector<ImageRequest> candidates;
    for (const BundleImage& im : e.images) candidates.push_back(im.id);
    // PTX is judged by its own .version; a file that cannot be read is passed over here and
    // reported if chosen without a driver.
    std::string ptx;
    auto ptx_text = [&](std::size_t i) -> Expected<std::string_view> {
      auto data = read_image(e.images[i]);
      if (!data) return data.error();
      ptx = std::move(*data);
      return std::string_view(ptx);
    };
    auto choice = select_for_driver(e.side, candidates, arch, kind, driver, m_index.cuda_version, ptx_text);
    if (!choice) return choice.error();
    if (choice->driver_too_old) {
      return make_error(ErrorCode::k_not_found,
                        "the bundle has no image of " + key + " for " + arch + " that a driver of CUDA " +
                            cuda_version_name(driver) + " loads (it was precompiled for " +
                            (m_index.driver_version != 0 ? "CUDA " + cuda_version_name(m_index.driver_version) + " drivers"
                                                         : "the daemon's own toolkit") +
                            "): precompile it with --driver " + cuda_version_name(driver));
    }
    const std::optional<Selection>& chosen = choice->chosen;
    if (!chosen) return make_error(ErrorCode::k_not_found, "the bundle has no image of " + key + " that runs on " + arch);
    const BundleImage& image = e.images[chosen->index];
    auto data = read_image(image);
    if (!data) return data.error();
    return Found{image, std::move(*data), chosen->needs_jit};
  }
  return make_error(ErrorCode::k_not_found, "key " + key + " is not in the bundle");
}

}  // namespace kcache
