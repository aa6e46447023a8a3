#include "manifest.hpp"

namespace kcache {
// Thrown by toml++'s internal checks (below), caught in parse_manifest.
struct TomlCheckFailed {};
}  // namespace kcache

// toml++ 3.3 (Debian 12) states its parser's preconditions as TOML_ASSERT_ASSUME, an optimiser
// assumption when NDEBUG is set, and some inputs break one: `[[[1]]]` reaches parse_key with '['
// (upstream marzer/tomlplusplus#301, found here by fuzz/manifest_fuzzer.cpp), which is undefined
// behaviour. So in this one file toml++ is built as without NDEBUG, with its checks throwing:
// such an input is refused like any other bad TOML.
#ifdef NDEBUG
#define KCACHE_NDEBUG_WAS_SET
#undef NDEBUG
#endif
#define TOML_ASSERT(expr) ((expr) ? static_cast<void>(0) : throw ::kcache::TomlCheckFailed{})
// A few noexcept accessors of toml::path check too; a failure there ends the process, as toml++'s
// own assert would. The parser's checks, which hostile input reaches, are not noexcept.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wterminate"
#endif
#include <toml++/toml.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#ifdef KCACHE_NDEBUG_WAS_SET
#define NDEBUG
#undef KCACHE_NDEBUG_WAS_SET
#endif

#include <exception>

#include "json_fields.hpp"

namespace kcache {
namespace {

using namespace json_fields;

constexpr std::string_view k_formats = "\"bc\", \"ll\", \"ptx\", \"cu\"";
constexpr std::string_view k_stds = "\"c++03\", \"c++11\", \"c++14\", \"c++17\", \"c++20\"";

std::optional<std::string> parse_std(std::string_view name) {
  for (std::string_view s : {"c++03", "c++11", "c++14", "c++17", "c++20"}) {
    if (name == s) return std::string(name);
  }
  return std::nullopt;
}
constexpr std::string_view k_guards = "\"reject\", \"stub\"";

std::optional<HostGuard> parse_guard(std::string_view name) {
  if (name == "reject") return HostGuard::reject;
  if (name == "stub") return HostGuard::stub;
  return std::nullopt;
}

ManifestModule module_from(const json& m, const std::string& at) {
  require_object(m, at,
                 {{"path", "link", "side", "format", "target", "opt_level", "debug", "lineinfo", "fast_math",
                   "entry_points", "cpu", "host_runtime", "emit", "include_dirs", "defines", "undefines", "std",
                   "name_expressions", "nvrtc_options"}});
  ManifestModule out;
  out.path = string_value(required(m, at, "path"), child(at, "path"), true);
  out.link = strings_field(m, at, "link", k_max_job_modules - 1);
  JobSpec& spec = out.spec;
  if (const json* f = find(m, "side")) spec.side = enum_value(*f, child(at, "side"), parse_side, side_names());
  if (const json* f = find(m, "format")) out.format = enum_value(*f, child(at, "format"), parse_format, k_formats);
  spec.target = string_field(m, at, "target", "", 256);
  CompileOptions& o = spec.options;
  if (const json* f = find(m, "opt_level")) o.opt_level = static_cast<std::uint32_t>(integer_value(*f, child(at, "opt_level"), 0, 3));
  o.debug_info = bool_field(m, at, "debug", false);
  o.lineinfo = bool_field(m, at, "lineinfo", false);
  o.fast_math = bool_field(m, at, "fast_math", false);
  o.entry_points = strings_field(m, at, "entry_points", 4096);
  o.cpu = string_field(m, at, "cpu", "", 256);
  if (const json* f = find(m, "host_runtime")) o.guard = enum_value(*f, child(at, "host_runtime"), parse_guard, k_guards);
  if (const json* f = find(m, "emit")) {
    std::string here = child(at, "emit");
    const json& kinds = array_value(*f, here, 3);
    for (std::size_t i = 0; i < kinds.size(); ++i) {
      ImageKind kind = enum_value(kinds[i], element(here, i), parse_kind, kind_names());
      if (kind_side(kind) != spec.side) {
        invalid(element(here, i), "\"" + std::string(kind_name(kind)) + "\" is a " +
                                      std::string(side_name(kind_side(kind))) + " image kind, but the module's side is " +
                                      std::string(side_name(spec.side)));
      }
      out.emit.push_back(kind);
    }
  }
  out.include_dirs = strings_field(m, at, "include_dirs", 256);
  std::vector<std::string> defines = strings_field(m, at, "defines", k_max_nvrtc_options);
  std::vector<std::string> undefines = strings_field(m, at, "undefines", k_max_nvrtc_options);
  std::string standard;
  if (const json* f = find(m, "std")) standard = enum_value(*f, child(at, "std"), parse_std, k_stds);
  std::vector<std::string> name_expressions = strings_field(m, at, "name_expressions", k_max_name_expressions);
  std::vector<std::string> nvrtc_options = strings_field(m, at, "nvrtc_options", k_max_nvrtc_options);
  // Whether the module is CUDA C++ is known from its format and path (kcache/job.hpp).
  if (format_named(out.format, out.path) != InputFormat::cuda_cpp) {
    for (const char* field : {"include_dirs", "defines", "undefines", "std", "name_expressions", "nvrtc_options"}) {
      if (find(m, field) != nullptr) invalid(child(at, field), "is for CUDA C++ modules (format \"cu\", or a .cu path)");
    }
    return out;
  }
  // The NVRTC options in the order `kcache compile --std -X -D -U` gives them.
  std::vector<std::string>& options = spec.source.nvrtc_options;
  if (!standard.empty()) options.push_back("--std=" + standard);
  options.insert(options.end(), nvrtc_options.begin(), nvrtc_options.end());
  for (const std::string& d : defines) options.push_back("-D" + d);
  for (const std::string& u : undefines) options.push_back("-U" + u);
  spec.source.name_expressions = std::move(name_expressions);
  return out;
}

Manifest manifest_from(const json& doc) {
  require_object(doc, "", {{"archs", "modules"}});
  Manifest out;
  out.archs = strings_field(doc, "", "archs", k_max_manifest_archs);
  for (std::size_t i = 0; i < out.archs.size(); ++i) {
    if (!is_device_arch(out.archs[i])) {
      expected(element("archs", i), "an SM arch such as \"sm_90\" or an AMD target ID such as \"gfx90a\"",
               doc.at("archs")[i]);
    }
  }
  const json& modules = array_value(required(doc, "", "modules"), "modules", k_max_manifest_modules);
  if (modules.empty()) invalid("modules", "empty: list at least one module");
  for (std::size_t i = 0; i < modules.size(); ++i) out.modules.push_back(module_from(modules[i], element("modules", i)));
  return out;
}

// The JSON document of a TOML one, for the one validator; dates and times, which no field takes,
// are refused here.
json json_from_toml(const toml::node& node, const std::string& at) {
  if (const toml::table* t = node.as_table()) {
    json out = json::object();
    for (auto&& [key, value] : *t) out[std::string(key.str())] = json_from_toml(value, child(at, key.str()));
    return out;
  }
  if (const toml::array* a = node.as_array()) {
    json out = json::array();
    for (std::size_t i = 0; i < a->size(); ++i) out.push_back(json_from_toml(*a->get(i), element(at, i)));
    return out;
  }
  if (const auto* s = node.as_string()) return s->get();
  if (const auto* i = node.as_integer()) return i->get();
  if (const auto* f = node.as_floating_point()) return f->get();
  if (const auto* b = node.as_boolean()) return b->get();
  invalid(at, "a TOML date or time, which no manifest field takes");
}

// Where the first byte above 0x7f is, as "line L, column C", or empty when there is none.
// toml++ 3.3 (Debian 12) reaches __builtin_unreachable when it asks whether some non-ASCII
// characters are whitespace (U+00A1 to U+0499 and U+2D6E to U+3167: its generated table has
// holes; found by fuzz/manifest_fuzzer.cpp), so a TOML manifest is refused before the parser sees
// such a byte. In ASCII, other characters are still written as \uXXXX in "basic strings".
std::string first_non_ascii(std::string_view text) {
  std::size_t line = 1, column = 1;
  for (char c : text) {
    if (static_cast<unsigned char>(c) > 0x7f) return "line " + std::to_string(line) + ", column " + std::to_string(column);
    if (c == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {};
}

Error manifest_error(const std::string& at, const std::string& message) {
  return make_error(ErrorCode::k_invalid_argument, "manifest " + (at.empty() ? std::string() : at + ": ") + message);
}

}  // namespace

ManifestSyntax manifest_syntax_of(const std::filesystem::path& path) {
  return path.extension() == ".toml" ? ManifestSyntax::toml : ManifestSyntax::json;
}

Expected<Manifest> parse_manifest(std::string_view text, ManifestSyntax syntax) {
  json doc;
  if (syntax == ManifestSyntax::toml) {
    if (std::string where = first_non_ascii(text); !where.empty()) {
      return manifest_error("", "is not ASCII at " + where +
                                    ": a TOML manifest is ASCII (write other characters as \\uXXXX in a \"string\", "
                                    "or use a JSON manifest)");
    }
    try {
      toml::table table = toml::parse(text);
      doc = json_from_toml(table, "");
    } catch (const toml::parse_error& e) {
      return manifest_error("", "is not valid TOML: line " + std::to_string(e.source().begin.line) + ", column " +
                                    std::to_string(e.source().begin.column) + ": " + std::string(e.description()));
    } catch (const TomlCheckFailed&) {
      return manifest_error("", "is not valid TOML (refused by the TOML parser's own checks)");
    } catch (const Invalid& e) {
      return manifest_error(e.at, e.message);
    }
  } else {
    try {
      doc = json::parse(text);
    } catch (const json::exception& e) {
      return manifest_error("", std::string("is not valid JSON: ") + e.what());
    }
  }
  try {
    return manifest_from(doc);
  } catch (const Invalid& e) {
    return manifest_error(e.at, e.message);
  } catch (const json::exception& e) {
    // The readers check every type before reading it; this is a bug, but still an answer.
    return manifest_error("", std::string("cannot be read: ") + e.what());
  }
}

}  // namespace kcache
