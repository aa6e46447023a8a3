// AMD GPU target IDs (LLVM's AMDGPUUsage "Target ID"): a processor and its xnack and sramecc
// settings, "gfx90a", "gfx90a:xnack-", "gfx942:sramecc+:xnack-". The processors kcache compiles
// for are gfx9 and newer (what ROCm still supports), with LLVM 22's generic targets. Shared by
// the daemon (validation, the pipeline's oclc constants), clients and bundles (selection).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kcache/expected.hpp"

namespace kcache {

inline constexpr std::string_view k_amd_device_triple = "amdgcn-amd-amdhsa";

// A target feature's setting in a target ID: unspecified ("any": the code runs with the feature
// on or off), on (+) or off (-).
enum class FeatureSetting : std::uint8_t { any = 0, on = 1, off = 2 };

struct AmdProcessor {
  std::string_view name;     // "gfx90a", "gfx11-generic"
  std::string_view generic;  // the generic target whose code runs on it ("gfx11-generic"); empty: none
  bool xnack = false;        // the processor has the xnack setting (LLVM's FEATURE_XNACK)
  bool sramecc = false;      // the processor has the sramecc setting (FEATURE_SRAMECC)
  bool wave32 = false;       // waves of 32 by default (gfx10 and newer); else 64
  int isa_major = 0, isa_minor = 0, isa_stepping = 0;  // LLVM's IsaVersion
  bool is_generic() const { return name.ends_with("-generic"); }
  // The ISA version as ROCm's oclc_isa_version constant spells it: 9.0.10 -> 9010.
  int oclc_isa_version() const { return isa_major * 1000 + isa_minor * 100 + isa_stepping; }
};

// Every processor kcache compiles for, gfx9 and newer, as LLVM 22's AMDGPU TargetParser describes
// them (a server test checks the table against the LLVM linked in).
std::span<const AmdProcessor> amd_processors();
const AmdProcessor* find_amd_processor(std::string_view name);

struct AmdTarget {
  const AmdProcessor* processor = nullptr;
  FeatureSetting sramecc = FeatureSetting::any;
  FeatureSetting xnack = FeatureSetting::any;

  // The canonical target ID: features in LLVM's order (sramecc, then xnack), "gfx90a:xnack-".
  std::string str() const;
  // LLVM target features for codegen: "+xnack,-sramecc"; empty when every setting is any.
  std::string llvm_features() const;
  bool operator==(const AmdTarget& other) const {
    return processor == other.processor && sramecc == other.sramecc && xnack == other.xnack;
  }
};

// Whether `arch` names an AMD GPU ("gfx..."), valid or not: which vendor's rules apply.
bool is_amd_arch(std::string_view arch);

// Parses and validates a target ID: a known processor (gfx9 or newer, or a generic target), then
// at most one setting each of sramecc and xnack, in either order, and only settings the processor
// has. INVALID_ARGUMENT says what is wrong and what is known.
Expected<AmdTarget> parse_amd_target(std::string_view text);

// Whether an image compiled for `image` runs on a device described by `device`: the same
// processor (or the processor's generic target), and each setting the image fixed (on or off)
// equal to the device's. A device setting that is any (not stated) is met only by images that
// leave it any too, since the device's real setting is unknown.
bool amd_image_runs_on(const AmdTarget& image, const AmdTarget& device);

}  // namespace kcache
