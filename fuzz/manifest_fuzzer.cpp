// libFuzzer target: the precompile manifest parser (client/src/manifest.cpp), the same bytes as
// JSON and as TOML. Any input must end in a manifest or a clean Error (never a crash, a sanitizer
// report or an exception), and an accepted manifest must hold only what the schema allows. And the
// compiler launcher's direct-mode manifests (client/cli/launcher/direct.cpp), which a daemon may
// hand a build: read or refused, and one read writes back to what reads the same.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "launcher/direct.hpp"
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
  if (auto direct = kcache::launcher::read_manifest(bytes)) {
    if (direct->size() > kcache::launcher::k_manifest_entries) __builtin_trap();
    auto again = kcache::launcher::read_manifest(kcache::launcher::write_manifest(*direct));
    if (!again || again->size() != direct->size()) __builtin_trap();
    for (std::size_t i = 0; i < direct->size(); ++i) {
      if ((*again)[i].request != (*direct)[i].request || (*again)[i].files.size() != (*direct)[i].files.size() ||
          (*again)[i].absent != (*direct)[i].absent) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
