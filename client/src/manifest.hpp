// A precompile manifest (`kcache precompile MANIFEST`): which modules to compile, how, and for
// which archs. JSON or TOML with one schema (docs/cli.md, "Manifests"); TOML is converted to the same
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

// One module: its files and the job it is, as `kcache compile` would make it of the same flags.
struct ManifestModule {
  std::string path;               // as written: relative to the manifest's folder unless absolute
  std::vector<std::string> link;  // more modules linked with `path` into one image per arch
  std::optional<InputFormat> format;  // of every file; empty: by each file's name, else its bytes
  // side, target, options (opt_level, debug, lineinfo, fast_math, entry_points, cpu, host_runtime
  // as options.guard) and, for a CUDA C++ module (format_named: format "cu", or a .cu path), the
  // NVRTC options that std, nvrtc_options, defines and undefines make, in that order, and the name
  // expressions. Its formats and headers come from the files when they are read.
  JobSpec spec;
  std::vector<ImageKind> emit;  // empty: the side's default
  // CUDA C++: where the headers the source includes are found, relative to the manifest's folder
  // unless absolute (as `kcache compile -I`).
  std::vector<std::string> include_dirs;
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
