// libFuzzer target: the precompile manifest parser (client/src/manifest.cpp), the same bytes as
// JSON and as TOML. Any input must end in a manifest or a clean Error (never a crash, a sanitizer
// report or an exception), and an accepted manifest must hold only what the schema allows.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "manifest.hpp"

namespace {

void check(std::string_view bytes, kcache::ManifestSyntax syntax) {
  auto manifest = kcache::parse_manifest(bytes, syntax);
  if (!manifest) {
    if (!manifest.error().message.starts_with("manifest ")) __builtin_trap();
    return;
  }
  if (manifest->modules.empty() || manifest->modules.size() > kcache::k_max_manifest_modules) __builtin_trap();
  for (const std::string& arch : manifest->archs) {
    if (!kcache::is_device_arch(arch)) __builtin_trap();
  }
  for (const kcache::ManifestModule& m : manifest->modules) {
    if (m.path.empty() || m.spec.options.opt_level > 3) __builtin_trap();
    for (kcache::ImageKind kind : m.emit) {
      if (kcache::kind_side(kind) != m.spec.side) __builtin_trap();
    }
    // Only a CUDA C++ module carries NVRTC options or name expressions.
    bool source = kcache::format_named(m.format, m.path) == kcache::InputFormat::cuda_cpp;
    if (!source && !(m.spec.source.nvrtc_options.empty() && m.spec.source.name_expressions.empty())) __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  check(bytes, kcache::ManifestSyntax::json);
  check(bytes, kcache::ManifestSyntax::toml);
  return 0;
}
