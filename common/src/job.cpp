#include "kcache/job.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>

namespace kcache {

std::string_view side_name(Side side) { return side == Side::host ? "host" : "device"; }

std::optional<Side> parse_side(std::string_view name) {
  if (name == "device") return Side::device;
  if (name == "host") return Side::host;
  return std::nullopt;
}

std::string_view format_name(InputFormat format) {
  switch (format) {
    case InputFormat::llvm_bitcode: return "bc";
    case InputFormat::llvm_text: return "ll";
    case InputFormat::ptx: return "ptx";
  }
  return "?";
}

std::optional<InputFormat> parse_format(std::string_view name) {
  if (name == "bc") return InputFormat::llvm_bitcode;
  if (name == "ll") return InputFormat::llvm_text;
  if (name == "ptx") return InputFormat::ptx;
  return std::nullopt;
}

std::string_view kind_name(ImageKind kind) {
  switch (kind) {
    case ImageKind::ptx: return "ptx";
    case ImageKind::cubin: return "cubin";
    case ImageKind::object: return "obj";
  }
  return "?";
}

std::string_view kind_extension(ImageKind kind) { return kind == ImageKind::object ? "o" : kind_name(kind); }

std::optional<ImageKind> parse_kind(std::string_view name) {
  if (name == "ptx") return ImageKind::ptx;
  if (name == "cubin") return ImageKind::cubin;
  if (name == "obj" || name == "o" || name == "object") return ImageKind::object;
  return std::nullopt;
}

Side kind_side(ImageKind kind) { return kind == ImageKind::object ? Side::host : Side::device; }

InputFormat infer_format(std::string_view bytes) {
  static constexpr char k_raw_magic[] = {'B', 'C', '\xC0', '\xDE'};
  static constexpr char k_wrapper_magic[] = {'\xDE', '\xC0', '\x17', '\x0B'};
  if (bytes.size() >= 4 && (std::memcmp(bytes.data(), k_raw_magic, 4) == 0 ||
                            std::memcmp(bytes.data(), k_wrapper_magic, 4) == 0)) {
    return InputFormat::llvm_bitcode;
  }
  // PTX always starts (after comments) with .version and names a .target; LLVM IR never has these.
  std::string_view head = bytes.substr(0, 4096);
  if (head.find(".version") != std::string_view::npos && head.find(".target") != std::string_view::npos) {
    return InputFormat::ptx;
  }
  return InputFormat::llvm_text;
}

std::string SmArch::str() const {
  std::string out = "sm_" + std::to_string(number());
  if (variant != 0) out += variant;
  return out;
}

std::optional<SmArch> parse_sm_arch(std::string_view text) {
  if (!text.starts_with("sm_")) return std::nullopt;
  text.remove_prefix(3);
  SmArch arch;
  if (!text.empty() && (text.back() == 'a' || text.back() == 'f')) {
    arch.variant = text.back();
    text.remove_suffix(1);
  }
  if (text.size() < 2 || text.size() > 3) return std::nullopt;
  int number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  arch.major = number / 10;
  arch.minor = number % 10;
  if (arch.major == 0) return std::nullopt;
  return arch;
}

std::string triple_arch(std::string_view triple) {
  return std::string(triple.substr(0, triple.find('-')));
}

bool JobSpec::has_ptx_input() const {
  return format == InputFormat::ptx || std::find(linked_formats.begin(), linked_formats.end(), InputFormat::ptx) !=
                                           linked_formats.end();
}

Expected<void> canonicalize(JobSpec& spec, std::string_view host_triple) {
  CompileOptions& o = spec.options;
  if (spec.module_count() > k_max_job_modules) {
    return make_error(ErrorCode::k_invalid_argument, "the job links " + std::to_string(spec.module_count()) +
                                                         " modules; a job links at most " +
                                                         std::to_string(k_max_job_modules) + ": link some first");
  }
  if (spec.side == Side::host && !spec.linked_formats.empty()) {
    return make_error(ErrorCode::k_invalid_argument,
                      "a host job compiles one module; linking several is for device code (relocatable device "
                      "code): send one host job per module");
  }
  if (o.opt_level > 3) {
    return make_error(ErrorCode::k_invalid_argument,
                      "optimisation level " + std::to_string(o.opt_level) + " is out of range: use 0, 1, 2 or 3");
  }
  if (spec.side == Side::device && !o.cpu.empty()) {
    return make_error(ErrorCode::k_invalid_argument,
                      "cpu '" + o.cpu + "' applies to host jobs only; device jobs choose GPUs with archs (sm_XX)");
  }
  if (spec.target.empty()) spec.target = spec.side == Side::device ? std::string(k_device_triple) : std::string(host_triple);
  bool device_triple = spec.target.starts_with("nvptx") || spec.target.starts_with("amdgcn");
  if (spec.side == Side::device && !spec.target.starts_with("nvptx64")) {
    return make_error(ErrorCode::k_invalid_argument, "device jobs target " + std::string(k_device_triple) + "; '" +
                                                         spec.target + "' is not an NVPTX triple (host code goes with side host)");
  }
  if (spec.side == Side::host && device_triple) {
    return make_error(ErrorCode::k_invalid_argument,
                      "host jobs target the CPU; '" + spec.target + "' is a GPU triple: send it with side device");
  }
  if (spec.side == Side::device) o.guard = HostGuard::reject;  // the guard applies to host code only
  if (spec.side == Side::host) spec.ptx_isa_cap = 0;            // a driver JITs device code only
  if (o.debug_info) o.lineinfo = false;  // full debug info includes line tables
  for (const std::string& name : o.entry_points) {
    if (name.empty()) return make_error(ErrorCode::k_invalid_argument, "an entry point name is empty");
  }
  std::sort(o.entry_points.begin(), o.entry_points.end());
  o.entry_points.erase(std::unique(o.entry_points.begin(), o.entry_points.end()), o.entry_points.end());
  return {};
}

std::vector<ImageRequest> ptx_in_place_of_cubins(const std::vector<ImageRequest>& images) {
  std::vector<ImageRequest> out;
  for (ImageRequest want : images) {
    if (want.kind == ImageKind::cubin) want.kind = ImageKind::ptx;
    if (std::find(out.begin(), out.end(), want) == out.end()) out.push_back(std::move(want));
  }
  return out;
}

Expected<std::vector<ImageRequest>> plan_images(const JobSpec& spec, const std::vector<std::string>& archs,
                                                const std::vector<ImageKind>& kinds) {
  std::vector<ImageRequest> out;
  for (ImageKind kind : kinds) {
    if (kind_side(kind) != spec.side) {
      return make_error(ErrorCode::k_invalid_argument,
                        std::string("image kind '") + std::string(kind_name(kind)) + "' is not produced by " +
                            std::string(side_name(spec.side)) + " jobs: device jobs emit ptx or cubin, host jobs obj");
    }
  }
  if (spec.side == Side::host) {
    if (!archs.empty()) {
      return make_error(ErrorCode::k_invalid_argument,
                        "host jobs take no arch (got '" + archs.front() + "'); choose the host CPU with cpu instead");
    }
    out.push_back({triple_arch(spec.target), ImageKind::object});
    return out;
  }
  if (archs.empty()) {
    return make_error(ErrorCode::k_invalid_argument, "no arch given: a device job names at least one GPU arch, e.g. sm_80");
  }
  std::vector<ImageKind> wanted = kinds.empty() ? std::vector<ImageKind>{ImageKind::ptx} : kinds;
  for (const std::string& arch : archs) {
    auto parsed = parse_sm_arch(arch);
    if (!parsed) {
      return make_error(ErrorCode::k_invalid_argument,
                        "unknown arch '" + arch + "': expected sm_XY with an optional a or f suffix, e.g. sm_80, sm_90a");
    }
    for (ImageKind kind : wanted) {
      ImageRequest r{parsed->str(), kind};
      if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(std::move(r));
    }
  }
  return out;
}

std::optional<std::uint64_t> parse_size(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::uint64_t scale = 1;
  switch (text.back()) {
    case 'K': case 'k': scale = 1ULL << 10; break;
    case 'M': case 'm': scale = 1ULL << 20; break;
    case 'G': case 'g': scale = 1ULL << 30; break;
    case 'T': case 't': scale = 1ULL << 40; break;
    default: break;
  }
  if (scale != 1) text.remove_suffix(1);
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  if (value > UINT64_MAX / scale) return std::nullopt;
  return value * scale;
}

}  // namespace kcache
