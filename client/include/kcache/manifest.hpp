// A precompile manifest (`kcache precompile MANIFEST`): which modules to compile, how, and for
// which archs. JSON or TOML with one schema (README, "Manifests"); TOML is converted to the same
// document and checked by the same validator. Every field is checked for its type and range and
// an unknown field is an error, so a typo cannot pass silently; an error names the field by its
// position: `manifest modules[2].opt_level: expected an integer 0-3, got the string "3"`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/expected.hpp"
#include "kcache/job.hpp"

namespace kcache {

// The most modules one manifest may list, and the most archs it may name.
inline constexpr std::size_t k_max_manifest_modules = 100000;
inline constexpr std::size_t k_max_manifest_archs = 64;
// The most bytes a manifest file may hold (its modules' entries at about 600 bytes each).
inline constexpr std::uint64_t k_max_manifest_bytes = 64ULL << 20;

struct ManifestModule {
  std::string path;               // as written: relative to the manifest's folder unless absolute
  std::vector<std::string> link;  // more modules linked with `path` into one image per arch
  Side side = Side::device;
  std::optional<InputFormat> format;  // empty: inferred from each file's bytes
  std::string target;
  std::uint32_t opt_level = 2;
  bool debug = false;
  bool lineinfo = false;
  bool fast_math = false;
  std::vector<std::string> entry_points;
  std::string cpu;
  HostGuard host_runtime = HostGuard::reject;
  std::vector<ImageKind> emit;  // empty: the side's default
  // CUDA C++ modules (format "cu", or a path ending in .cu): as `kcache compile -I -D -U --std
  // --name-expr -X`. include_dirs are relative to the manifest's folder unless absolute.
  std::vector<std::string> include_dirs;
  std::vector<std::string> defines;
  std::vector<std::string> undefines;
  std::string std;
  std::vector<std::string> name_expressions;
  std::vector<std::string> nvrtc_options;
};

struct Manifest {
  std::vector<std::string> archs;  // SM archs for the device modules (--arch wins)
  std::vector<ManifestModule> modules;
};

enum class ManifestSyntax { json, toml };

// TOML for a file name ending in .toml, else JSON.
ManifestSyntax manifest_syntax_of(const std::filesystem::path& path);

// Parses and checks a manifest's bytes, with no file access (fuzzed: fuzz/manifest_fuzzer.cpp).
// INVALID_ARGUMENT, beginning "manifest ", naming the first bad field and its position.
Expected<Manifest> parse_manifest(std::string_view text, ManifestSyntax syntax);

}  // namespace kcache
