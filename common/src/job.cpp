#include "kcache/job.hpp"

#include "kcache/amd_target.hpp"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <map>

namespace kcache {

std::string_view side_name(Side side) { return side == Side::host ? "host" : "device"; }

std::optional<Side> parse_side(std::string_view name) {
  for (Side side : all_sides()) {
    if (name == side_name(side)) return side;
  }
  return std::nullopt;
}

std::span<const Side> all_sides() {
  static constexpr Side k_sides[] = {Side::device, Side::host};
  return k_sides;
}

std::string_view format_name(InputFormat format) {
  switch (format) {
    case InputFormat::llvm_bitcode: return "bc";
    case InputFormat::llvm_text: return "ll";
    case InputFormat::ptx: return "ptx";
    case InputFormat::cuda_cpp: return "cu";
  }
  return "?";
}

std::optional<InputFormat> parse_format(std::string_view name) {
  if (name == "bc") return InputFormat::llvm_bitcode;
  if (name == "ll") return InputFormat::llvm_text;
  if (name == "ptx") return InputFormat::ptx;
  if (name == "cu") return InputFormat::cuda_cpp;
  return std::nullopt;
}

std::string_view kind_name(ImageKind kind) {
  switch (kind) {
    case ImageKind::ptx: return "ptx";
    case ImageKind::cubin: return "cubin";
    case ImageKind::object: return "obj";
    case ImageKind::ltoir: return "ltoir";
    case ImageKind::hsaco: return "hsaco";
    case ImageKind::amdgcn: return "amdgcn";
    case ImageKind::file: return "file";
  }
  return "?";
}

std::string_view kind_extension(ImageKind kind) {
  if (kind == ImageKind::object) return "o";
  if (kind == ImageKind::amdgcn) return "s";
  return kind_name(kind);
}

std::optional<ImageKind> parse_kind(std::string_view name) {
  if (name == "o" || name == "object") return ImageKind::object;  // spellings of obj
  for (ImageKind kind : all_kinds()) {
    if (name == kind_name(kind)) return kind;
  }
  return std::nullopt;
}

std::span<const ImageKind> all_kinds() {
  static constexpr ImageKind k_kinds[] = {ImageKind::ptx,   ImageKind::cubin,  ImageKind::ltoir,
                                          ImageKind::hsaco, ImageKind::amdgcn, ImageKind::object};
  return k_kinds;
}

std::string_view outcome_name(Outcome outcome) {
  switch (outcome) {
    case Outcome::hit: return "hit";
    case Outcome::miss: return "miss";
    case Outcome::coalesced: return "coalesced";
  }
  return "?";
}

namespace {

// "a, b or c": `names` for a message.
template <typename T, typename Name>
std::string one_of(std::span<const T> values, Name name) {
  std::string out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    out += i == 0 ? "" : i + 1 == values.size() ? " or " : ", ";
    out += name(values[i]);
  }
  return out;
}

}  // namespace

Error unknown_kind_error(std::string_view text) {
  return make_error(ErrorCode::k_invalid_argument,
                    "unknown image kind '" + std::string(text) + "' (use " + one_of(all_kinds(), kind_name) + ")");
}

Error unknown_side_error(std::string_view text) {
  return make_error(ErrorCode::k_invalid_argument,
                    "unknown side '" + std::string(text) + "' (use " + one_of(all_sides(), side_name) + ")");
}

Side kind_side(ImageKind kind) { return kind == ImageKind::object ? Side::host : Side::device; }

bool is_amd_kind(ImageKind kind) { return kind == ImageKind::hsaco || kind == ImageKind::amdgcn; }

std::string implied_device_target(const std::vector<std::string>& archs) {
  if (archs.empty() || !std::all_of(archs.begin(), archs.end(), [](const std::string& a) { return is_amd_arch(a); })) {
    return {};
  }
  return std::string(k_amd_device_triple);
}

bool targets_amd(const JobSpec& spec) { return spec.side == Side::device && spec.target == k_amd_device_triple; }

bool JobSpec::is_source() const { return format == InputFormat::cuda_cpp; }

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

std::optional<InputFormat> format_named(std::optional<InputFormat> stated, std::string_view file) {
  if (stated) return stated;
  if (file.ends_with(".cu")) return InputFormat::cuda_cpp;
  return std::nullopt;
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

bool is_device_arch(std::string_view text) {
  return parse_sm_arch(text).has_value() || (is_amd_arch(text) && static_cast<bool>(parse_amd_target(text)));
}

std::string triple_arch(std::string_view triple) {
  return std::string(triple.substr(0, triple.find('-')));
}

bool JobSpec::has_ptx_input() const {
  return format == InputFormat::ptx || std::find(linked_formats.begin(), linked_formats.end(), InputFormat::ptx) !=
                                           linked_formats.end();
}

namespace {

Error bad_option(const std::string& option, const std::string& why) {
  return make_error(ErrorCode::k_invalid_argument, "NVRTC option '" + option.substr(0, 200) + "': " + why);
}

// The allow-list: each accepted spelling, its canonical name, and whether it takes a value.
struct AllowedOption {
  std::string_view canonical;
  std::vector<std::string_view> spellings;
  std::vector<std::string_view> values;  // empty: any (checked by the caller) or none
  bool takes_value;
};

const std::vector<AllowedOption>& allowed_options() {
  static const std::vector<AllowedOption> k_allowed = {
      {"--std", {"-std", "--std"}, {"c++03", "c++11", "c++14", "c++17", "c++20"}, true},
      {"--use_fast_math", {"-use_fast_math", "--use_fast_math"}, {}, false},
      {"-lineinfo", {"-lineinfo", "--generate-line-info"}, {}, false},
      {"-G", {"-G", "--device-debug"}, {}, false},
      {"--extra-device-vectorization", {"-extra-device-vectorization", "--extra-device-vectorization"}, {}, false},
      {"-rdc", {"-rdc", "--relocatable-device-code"}, {"true", "false"}, true},
      {"--maxrregcount", {"-maxrregcount", "--maxrregcount"}, {}, true},
      {"-default-device", {"-default-device", "--device-as-default-execution-space"}, {}, false},
      {"-dopt", {"-dopt", "--dopt"}, {"on", "off"}, true},
      {"--ftz", {"-ftz", "--ftz"}, {"true", "false"}, true},
      {"--prec-div", {"-prec-div", "--prec-div"}, {"true", "false"}, true},
      {"--prec-sqrt", {"-prec-sqrt", "--prec-sqrt"}, {"true", "false"}, true},
      {"--fmad", {"-fmad", "--fmad"}, {"true", "false"}, true},
      {"--restrict", {"-restrict", "--restrict"}, {}, false},
      {"-w", {"-w", "--disable-warnings"}, {}, false},
  };
  return k_allowed;
}

// Options NVRTC has that reach into the daemon's files, or that the job itself decides.
constexpr std::string_view k_file_options[] = {"-I", "--include-path", "--pre-include", "-include", "--pch",
                                               "-pch", "--create-pch", "--use-pch", "--pch-dir", "--pch-messages",
                                               "--instantiate-templates-in-pch", "-time", "--time", "--fdevice-time-trace"};
constexpr std::string_view k_arch_options[] = {"-arch", "--gpu-architecture"};

bool valid_macro_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

}  // namespace

Expected<std::vector<std::string>> canonical_nvrtc_options(const std::vector<std::string>& options) {
  if (options.size() > k_max_nvrtc_options) {
    return make_error(ErrorCode::k_invalid_argument, std::to_string(options.size()) + " NVRTC options; at most " +
                                                         std::to_string(k_max_nvrtc_options));
  }
  std::map<std::string, std::string> flags;   // canonical name -> canonical option (the last wins)
  std::map<std::string, std::string> macros;  // macro name -> its last -D or -U
  for (std::size_t i = 0; i < options.size(); ++i) {
    const std::string& option = options[i];
    if (option.size() > 4096 || option.find('\0') != std::string::npos) return bad_option(option, "too long or holds a NUL");
    std::string_view o = option;
    // -D and -U: -DNAME[=V], -D NAME[=V], --define-macro=..., --undefine-macro=...
    bool define = o.starts_with("-D") || o.starts_with("--define-macro");
    bool undefine = o.starts_with("-U") || o.starts_with("--undefine-macro");
    if (define || undefine) {
      std::string_view body;
      if (o == "-D" || o == "-U" || o == "--define-macro" || o == "--undefine-macro") {
        if (i + 1 >= options.size()) return bad_option(option, "needs a macro after it");
        body = options[++i];
      } else if (o.starts_with("--")) {
        std::size_t eq = o.find('=');
        if (eq == std::string_view::npos) return bad_option(option, "needs =NAME");
        body = o.substr(eq + 1);
      } else {
        body = o.substr(2);
      }
      std::string_view name = body.substr(0, body.find('='));
      if (!valid_macro_name(name)) return bad_option(option, "'" + std::string(name) + "' is not a macro name");
      if (undefine && name.size() != body.size()) return bad_option(option, "-U takes a name without a value");
      macros[std::string(name)] = (define ? "-D" : "-U") + std::string(body);
      continue;
    }
    std::string_view name = o.substr(0, o.find('='));
    for (std::string_view f : k_file_options) {
      if (name == f || (f.size() == 2 && o.starts_with(f))) {
        return bad_option(option, "it reads files on the daemon, which never reads a client's files: send headers "
                                  "with the job (the CLI collects them from its -I folders)");
      }
    }
    for (std::string_view a : k_arch_options) {
      if (name == a) return bad_option(option, "the arch comes from the job (its archs), not from an option");
    }
    if (name == "-dlto" || name == "--dlink-time-opt") return bad_option(option, "ask for ltoir images instead");
    const AllowedOption* allowed = nullptr;
    for (const AllowedOption& a : allowed_options()) {
      if (std::find(a.spellings.begin(), a.spellings.end(), name) != a.spellings.end()) allowed = &a;
    }
    if (allowed == nullptr) {
      std::string list;
      for (const AllowedOption& a : allowed_options()) list += (list.empty() ? "" : ", ") + std::string(a.canonical);
      return bad_option(option, "not on kcache's allow-list (-D, -U, " + list + ")");
    }
    bool has_value = name.size() != o.size();
    if (has_value != allowed->takes_value) {
      return bad_option(option, allowed->takes_value ? "needs =VALUE" : "takes no value");
    }
    std::string canonical(allowed->canonical);
    if (has_value) {
      std::string_view value = o.substr(name.size() + 1);
      if (!allowed->values.empty() &&
          std::find(allowed->values.begin(), allowed->values.end(), value) == allowed->values.end()) {
        std::string list;
        for (std::string_view v : allowed->values) list += (list.empty() ? "" : ", ") + std::string(v);
        return bad_option(option, "the value is one of " + list);
      }
      if (allowed->canonical == "--maxrregcount") {
        unsigned n = 0;
        auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
        if (ec != std::errc() || end != value.data() + value.size() || n < 16 || n > 255) {
          return bad_option(option, "the register count is a number from 16 to 255");
        }
      }
      flags[canonical] = canonical + "=" + std::string(value);
    } else {
      flags[canonical] = canonical;
    }
  }
  if (auto rdc = flags.find("-rdc"); rdc != flags.end() && rdc->second == "-rdc=false") flags.erase(rdc);  // the default
  std::vector<std::string> out;
  for (auto& [name, option] : flags) out.push_back(std::move(option));
  for (auto& [name, option] : macros) out.push_back(std::move(option));
  return out;
}

namespace {

Expected<void> canonicalize_source(JobSpec& spec) {
  CompileOptions& o = spec.options;
  if (spec.side != Side::device) {
    return make_error(ErrorCode::k_invalid_argument, "CUDA C++ (format cu) is device code: send it with side device");
  }
  if (!spec.linked_formats.empty()) {
    return make_error(ErrorCode::k_invalid_argument,
                      "a CUDA C++ job compiles one source; other files travel as its headers");
  }
  if (!o.entry_points.empty()) {
    return make_error(ErrorCode::k_invalid_argument,
                      "entry points name IR functions; a CUDA C++ job names its templates with name expressions");
  }
  if (o.opt_level != 2) {
    return make_error(ErrorCode::k_invalid_argument, "a CUDA C++ job takes NVRTC's optimisation options (-dopt=off, -G), "
                                                     "not an optimisation level");
  }
  // The shared flags become the NVRTC options they mean, so either spelling gives one key.
  std::vector<std::string> options = spec.source.nvrtc_options;
  if (o.fast_math) options.push_back("--use_fast_math");
  if (o.debug_info) options.push_back("-G");
  if (o.lineinfo) options.push_back("-lineinfo");
  o.fast_math = o.debug_info = o.lineinfo = false;
  auto canonical = canonical_nvrtc_options(options);
  if (!canonical) return canonical.error();
  spec.source.nvrtc_options = std::move(*canonical);

  auto& headers = spec.source.headers;
  if (headers.size() > k_max_source_headers) {
    return make_error(ErrorCode::k_invalid_argument, std::to_string(headers.size()) + " headers; a job carries at most " +
                                                         std::to_string(k_max_source_headers));
  }
  for (const SourceHeader& h : headers) {
    std::string_view name = h.name;
    bool parent = name == ".." || name.starts_with("../") || name.ends_with("/..") ||
                  name.find("/../") != std::string_view::npos;
    if (name.empty() || name.size() > k_max_header_name || name.front() == '/' || parent ||
        name.find('\0') != std::string_view::npos || name.find('\n') != std::string_view::npos) {
      return make_error(ErrorCode::k_invalid_argument,
                        "header name '" + std::string(name.substr(0, 200)) +
                            "' is not one an #include may spell here: relative, without '..', at most " +
                            std::to_string(k_max_header_name) + " bytes");
    }
  }
  std::sort(headers.begin(), headers.end(), [](const SourceHeader& a, const SourceHeader& b) { return a.name < b.name; });
  for (std::size_t i = 1; i < headers.size(); ++i) {
    if (headers[i].name == headers[i - 1].name) {
      return make_error(ErrorCode::k_invalid_argument, "two headers are named '" + headers[i].name + "'");
    }
  }
  auto& names = spec.source.name_expressions;
  if (names.size() > k_max_name_expressions) {
    return make_error(ErrorCode::k_invalid_argument, std::to_string(names.size()) + " name expressions; at most " +
                                                         std::to_string(k_max_name_expressions));
  }
  for (const std::string& n : names) {
    if (n.empty() || n.size() > 4096 || n.find('\0') != std::string::npos) {
      return make_error(ErrorCode::k_invalid_argument, "a name expression is empty, too long or holds a NUL");
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return {};
}

}  // namespace

Expected<void> check_source_fields(const JobSpec& spec) {
  if (spec.is_source()) return {};
  if (spec.source.headers.empty() && spec.source.nvrtc_options.empty() && spec.source.name_expressions.empty()) return {};
  return make_error(ErrorCode::k_invalid_argument,
                    "headers, NVRTC options and name expressions belong to CUDA C++ jobs (format cu); this job is " +
                        std::string(format_name(spec.format)));
}

Expected<void> canonicalize(JobSpec& spec, std::string_view host_triple) {
  CompileOptions& o = spec.options;
  if (auto ok = check_source_fields(spec); !ok) return ok.error();
  if (spec.is_source()) {
    if (auto ok = canonicalize_source(spec); !ok) return ok.error();
  }
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
  if (spec.side == Side::device && !spec.target.starts_with("nvptx64") && spec.target != k_amd_device_triple) {
    return make_error(ErrorCode::k_invalid_argument,
                      "device jobs target " + std::string(k_device_triple) + " or " + std::string(k_amd_device_triple) +
                          "; '" + spec.target + "' is neither (host code goes with side host)");
  }
  if (targets_amd(spec)) {
    if (spec.format != InputFormat::llvm_bitcode && spec.format != InputFormat::llvm_text) {
      return make_error(ErrorCode::k_invalid_argument, std::string(format_name(spec.format)) +
                                                           " is NVIDIA's; AMD jobs (gfx archs) take LLVM IR (bc or ll)");
    }
    for (InputFormat f : spec.linked_formats) {
      if (f == InputFormat::ptx) {
        return make_error(ErrorCode::k_invalid_argument, "a linked module is PTX, which is NVIDIA's; AMD jobs link LLVM IR");
      }
    }
    if (spec.ptx_isa_cap != 0) {
      return make_error(ErrorCode::k_invalid_argument,
                        "driver_version names a CUDA driver; AMD jobs (gfx archs) take none: leave it out");
    }
    if (spec.amd_code_object_cap != 0 && spec.amd_code_object_cap < k_min_amd_code_object) {
      return make_error(ErrorCode::k_invalid_argument,
                        "amd_code_object_version " + std::to_string(spec.amd_code_object_cap) + ": LLVM " +
                            "writes code object versions 4 to 6 (4 for ROCm 5, 5 from ROCm 6.0, 6 from ROCm 6.2)");
    }
    if (spec.amd_code_object_cap >= k_max_amd_code_object) spec.amd_code_object_cap = 0;  // all the daemon writes
  } else if (spec.amd_code_object_cap != 0) {
    return make_error(ErrorCode::k_invalid_argument,
                      "amd_code_object_version names an AMD runtime's code objects; only AMD jobs (gfx archs) take "
                      "one: leave it out");
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
  if (spec.side == Side::device) {
    auto amd = std::count_if(archs.begin(), archs.end(), [](const std::string& a) { return is_amd_arch(a); });
    if (amd != 0 && static_cast<std::size_t>(amd) != archs.size()) {
      return make_error(ErrorCode::k_invalid_argument,
                        "the archs name both AMD (gfx...) and NVIDIA GPUs: send NVIDIA and AMD archs in separate jobs");
    }
  }
  for (ImageKind kind : kinds) {
    if (kind == ImageKind::file) {
      return make_error(ErrorCode::k_invalid_argument,
                        "image kind 'file' is a build step's output (Step), never a compile's");
    }
    if (kind_side(kind) != spec.side) {
      return make_error(ErrorCode::k_invalid_argument,
                        std::string("image kind '") + std::string(kind_name(kind)) + "' is not produced by " +
                            std::string(side_name(spec.side)) + " jobs: device jobs emit ptx or cubin, host jobs obj");
    }
    if (spec.side == Side::device && is_amd_kind(kind) != targets_amd(spec)) {
      return make_error(ErrorCode::k_invalid_argument,
                        targets_amd(spec) ? "image kind '" + std::string(kind_name(kind)) +
                                                "' is NVIDIA's; AMD jobs (gfx archs) emit hsaco or amdgcn"
                                          : "image kind '" + std::string(kind_name(kind)) +
                                                "' is AMD's: name AMD target IDs as archs (e.g. gfx90a), with no sm arch");
    }
    if (kind == ImageKind::ltoir && !spec.is_source()) {
      return make_error(ErrorCode::k_invalid_argument,
                        "ltoir images come from CUDA C++ jobs (NVRTC -dlto); LLVM IR and PTX jobs emit ptx or cubin");
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
  if (targets_amd(spec)) {
    std::vector<ImageKind> wanted = kinds.empty() ? std::vector<ImageKind>{ImageKind::hsaco} : kinds;
    for (const std::string& arch : archs) {
      if (!is_amd_arch(arch)) {
        return make_error(ErrorCode::k_invalid_argument,
                          "arch '" + arch + "' is not an AMD target ID, and this job targets " +
                              std::string(k_amd_device_triple) + ": send NVIDIA and AMD archs in separate jobs");
      }
      auto target = parse_amd_target(arch);
      if (!target) return target.error();
      for (ImageKind kind : wanted) {
        ImageRequest r{target->str(), kind};
        if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(std::move(r));
      }
    }
    return out;
  }
  std::vector<ImageKind> wanted = kinds.empty() ? std::vector<ImageKind>{ImageKind::ptx} : kinds;
  for (const std::string& arch : archs) {
    if (is_amd_arch(arch)) {
      return make_error(ErrorCode::k_invalid_argument,
                        "arch '" + arch + "' is an AMD GPU, and this job targets " + spec.target +
                            ": send NVIDIA and AMD archs in separate jobs (an AMD job's target is " +
                            std::string(k_amd_device_triple) + ", implied when every arch is a gfx one)");
    }
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
