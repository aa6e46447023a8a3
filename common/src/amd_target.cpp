#include "kcache/amd_target.hpp"

#include <algorithm>
#include <vector>

namespace kcache {
namespace {

// From LLVM 22's AMDGPU TargetParser (getArchAttrAMDGCN, getIsaVersion) and AMDGPUUsage's table
// of generic targets. Older processors (gfx6 to gfx8) are left out: ROCm no longer runs them.
constexpr AmdProcessor k_processors[] = {
    // name, generic, xnack, sramecc, wave32, isa
    {"gfx900", "gfx9-generic", true, false, false, 9, 0, 0},
    {"gfx902", "gfx9-generic", true, false, false, 9, 0, 2},
    {"gfx904", "gfx9-generic", true, false, false, 9, 0, 4},
    {"gfx906", "gfx9-generic", true, true, false, 9, 0, 6},
    {"gfx908", "", true, true, false, 9, 0, 8},
    {"gfx909", "gfx9-generic", true, false, false, 9, 0, 9},
    {"gfx90a", "", true, true, false, 9, 0, 10},
    {"gfx90c", "gfx9-generic", true, false, false, 9, 0, 12},
    {"gfx942", "gfx9-4-generic", true, true, false, 9, 4, 2},
    {"gfx950", "gfx9-4-generic", true, true, false, 9, 5, 0},
    {"gfx1010", "gfx10-1-generic", true, false, true, 10, 1, 0},
    {"gfx1011", "gfx10-1-generic", true, false, true, 10, 1, 1},
    {"gfx1012", "gfx10-1-generic", true, false, true, 10, 1, 2},
    {"gfx1013", "gfx10-1-generic", true, false, true, 10, 1, 3},
    {"gfx1030", "gfx10-3-generic", false, false, true, 10, 3, 0},
    {"gfx1031", "gfx10-3-generic", false, false, true, 10, 3, 1},
    {"gfx1032", "gfx10-3-generic", false, false, true, 10, 3, 2},
    {"gfx1033", "gfx10-3-generic", false, false, true, 10, 3, 3},
    {"gfx1034", "gfx10-3-generic", false, false, true, 10, 3, 4},
    {"gfx1035", "gfx10-3-generic", false, false, true, 10, 3, 5},
    {"gfx1036", "gfx10-3-generic", false, false, true, 10, 3, 6},
    {"gfx1100", "gfx11-generic", false, false, true, 11, 0, 0},
    {"gfx1101", "gfx11-generic", false, false, true, 11, 0, 1},
    {"gfx1102", "gfx11-generic", false, false, true, 11, 0, 2},
    {"gfx1103", "gfx11-generic", false, false, true, 11, 0, 3},
    {"gfx1150", "gfx11-generic", false, false, true, 11, 5, 0},
    {"gfx1151", "gfx11-generic", false, false, true, 11, 5, 1},
    {"gfx1152", "gfx11-generic", false, false, true, 11, 5, 2},
    {"gfx1153", "gfx11-generic", false, false, true, 11, 5, 3},
    {"gfx1200", "gfx12-generic", false, false, true, 12, 0, 0},
    {"gfx1201", "gfx12-generic", false, false, true, 12, 0, 1},
    {"gfx1250", "", false, false, true, 12, 5, 0},
    {"gfx1251", "", false, false, true, 12, 5, 1},
    {"gfx9-generic", "", true, false, false, 9, 0, 0},
    {"gfx9-4-generic", "", true, true, false, 9, 4, 0},
    {"gfx10-1-generic", "", true, false, true, 10, 1, 0},
    {"gfx10-3-generic", "", false, false, true, 10, 3, 0},
    {"gfx11-generic", "", false, false, true, 11, 0, 3},
    {"gfx12-generic", "", false, false, true, 12, 0, 0},
};

Error bad_target(std::string_view text, const std::string& why) {
  return make_error(ErrorCode::k_invalid_argument,
                    "AMD target ID '" + std::string(text.substr(0, 100)) + "': " + why);
}

char setting_sign(FeatureSetting s) { return s == FeatureSetting::on ? '+' : '-'; }

bool setting_runs(FeatureSetting image, FeatureSetting device) {
  return image == FeatureSetting::any || image == device;
}

}  // namespace

std::span<const AmdProcessor> amd_processors() { return k_processors; }

const AmdProcessor* find_amd_processor(std::string_view name) {
  for (const AmdProcessor& p : k_processors) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

bool is_amd_arch(std::string_view arch) { return arch.starts_with("gfx"); }

std::string AmdTarget::str() const {
  std::string out(processor != nullptr ? processor->name : "?");
  if (sramecc != FeatureSetting::any) out += std::string(":sramecc") + setting_sign(sramecc);
  if (xnack != FeatureSetting::any) out += std::string(":xnack") + setting_sign(xnack);
  return out;
}

std::string AmdTarget::llvm_features() const {
  std::string out;
  if (sramecc != FeatureSetting::any) out += std::string(1, setting_sign(sramecc)) + "sramecc";
  if (xnack != FeatureSetting::any) out += std::string(out.empty() ? "" : ",") + setting_sign(xnack) + "xnack";
  return out;
}

Expected<AmdTarget> parse_amd_target(std::string_view text) {
  std::string_view rest = text;
  std::string_view name = rest.substr(0, rest.find(':'));
  rest.remove_prefix(name.size());
  AmdTarget target;
  target.processor = find_amd_processor(name);
  if (target.processor == nullptr) {
    std::string known;
    for (const AmdProcessor& p : k_processors) known += (known.empty() ? "" : ", ") + std::string(p.name);
    return bad_target(text, "unknown processor '" + std::string(name.substr(0, 100)) +
                                "'; kcache compiles for gfx9 and newer: " + known);
  }
  while (!rest.empty()) {
    rest.remove_prefix(1);  // ':'
    std::string_view feature = rest.substr(0, rest.find(':'));
    rest.remove_prefix(feature.size());
    if (feature.size() < 2 || (feature.back() != '+' && feature.back() != '-')) {
      return bad_target(text, "'" + std::string(feature) + "' is not a setting: write sramecc+, sramecc-, xnack+ or xnack-");
    }
    FeatureSetting setting = feature.back() == '+' ? FeatureSetting::on : FeatureSetting::off;
    std::string_view which = feature.substr(0, feature.size() - 1);
    FeatureSetting* slot = nullptr;
    bool supported = false;
    if (which == "xnack") {
      slot = &target.xnack;
      supported = target.processor->xnack;
    } else if (which == "sramecc") {
      slot = &target.sramecc;
      supported = target.processor->sramecc;
    } else {
      return bad_target(text, "unknown feature '" + std::string(which) + "': a target ID sets sramecc and xnack only");
    }
    if (!supported) {
      return bad_target(text, std::string(target.processor->name) + " has no " + std::string(which) +
                                  " setting: leave it out");
    }
    if (*slot != FeatureSetting::any) return bad_target(text, std::string(which) + " is set twice");
    *slot = setting;
  }
  return target;
}

bool amd_image_runs_on(const AmdTarget& image, const AmdTarget& device) {
  if (image.processor == nullptr || device.processor == nullptr) return false;
  bool same = image.processor == device.processor;
  bool generic = !device.processor->generic.empty() && image.processor->name == device.processor->generic;
  if (!same && !generic) return false;
  return setting_runs(image.xnack, device.xnack) && setting_runs(image.sramecc, device.sramecc);
}

}  // namespace kcache
