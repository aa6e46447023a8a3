#include "kcache/select.hpp"

namespace kcache {
namespace {

struct Best {
  std::optional<std::size_t> index;
  int rank = -1;
  void offer(std::size_t i, int r) {
    if (r > rank) {
      rank = r;
      index = i;
    }
  }
};

bool same_version(const SmArch& a, const SmArch& b) { return a.major == b.major && a.minor == b.minor; }

}  // namespace

std::optional<Selection> select_image(std::span<const ImageRequest> candidates, const SmArch& device,
                                      std::optional<ImageKind> only_kind, const Loadable& loadable) {
  Best exact_cubin, compatible_cubin, ptx;
  // LTO-IR is no driver's to load: nvJitLink links it later. Fetched only when asked for by
  // kind, and only for its own arch.
  if (only_kind == ImageKind::ltoir) {
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      auto arch = parse_sm_arch(candidates[i].arch);
      if (candidates[i].kind == ImageKind::ltoir && arch && *arch == device) return Selection{i, false};
    }
    return std::nullopt;
  }
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const ImageRequest& c = candidates[i];
    if (only_kind && c.kind != *only_kind) continue;
    auto arch = parse_sm_arch(c.arch);
    if (!arch) continue;
    // Each rule ranks what it would take; the driver is asked only about those (reading a PTX's
    // .version can cost a read from disk).
    Best* rule = nullptr;
    int rank = 0;
    if (c.kind == ImageKind::cubin) {
      if (*arch == device) {
        rule = &exact_cubin;
        rank = 2;
      } else if (same_version(*arch, device)) {
        rule = &exact_cubin;
        rank = arch->variant == 'a' ? 1 : 0;
      } else if (arch->variant == 0 && arch->major == device.major && arch->minor < device.minor) {
        rule = &compatible_cubin;
        rank = arch->minor;
      }
    } else if (c.kind == ImageKind::ptx) {
      bool usable = arch->variant == 0 ? arch->number() <= device.number() : same_version(*arch, device);
      if (usable) {
        rule = &ptx;
        rank = arch->number() * 2 + (*arch == device ? 1 : 0);
      }
    }
    if (rule != nullptr && rank > rule->rank && (!loadable || loadable(i))) rule->offer(i, rank);
  }
  if (exact_cubin.index) return Selection{*exact_cubin.index, false};
  if (compatible_cubin.index) return Selection{*compatible_cubin.index, false};
  if (ptx.index) return Selection{*ptx.index, true};
  return std::nullopt;
}

std::optional<Selection> select_amd_image(std::span<const ImageRequest> candidates, const AmdTarget& device,
                                          std::optional<ImageKind> only_kind) {
  if (only_kind == ImageKind::amdgcn) {
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      if (candidates[i].kind == ImageKind::amdgcn && candidates[i].arch == device.str()) return Selection{i, false};
    }
    return std::nullopt;
  }
  if (only_kind && only_kind != ImageKind::hsaco) return std::nullopt;
  Best best;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].kind != ImageKind::hsaco) continue;
    auto image = parse_amd_target(candidates[i].arch);
    if (!image || !amd_image_runs_on(*image, device)) continue;
    int specified = (image->xnack != FeatureSetting::any ? 1 : 0) + (image->sramecc != FeatureSetting::any ? 1 : 0);
    int rank = image->processor == device.processor ? 10 + specified : specified;  // the generic target below
    if (*image == device) rank = 100;
    best.offer(i, rank);
  }
  if (best.index) return Selection{*best.index, false};
  return std::nullopt;
}

Expected<std::optional<Selection>> select_for_side(Side side, std::span<const ImageRequest> candidates,
                                                   const std::string& arch, std::optional<ImageKind> only_kind,
                                                   const Loadable& loadable) {
  if (side == Side::device && is_amd_arch(arch)) {
    auto device = parse_amd_target(arch);
    if (!device) return device.error();
    return select_amd_image(candidates, *device, only_kind);
  }
  if (side == Side::device) {
    auto device = parse_sm_arch(arch);
    if (!device) {
      return make_error(ErrorCode::k_invalid_argument, "'" + arch + "' is not a GPU arch: name the device's, e.g. sm_90 or gfx90a:xnack-");
    }
    return select_image(candidates, *device, only_kind, loadable);
  }
  std::optional<Selection> chosen;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].arch == arch || arch.empty()) chosen = Selection{i, false};
  }
  return chosen;
}

Expected<DriverChoice> select_for_driver(Side side, std::span<const ImageRequest> candidates, const std::string& arch,
                                         std::optional<ImageKind> only_kind, CudaVersion driver, CudaVersion toolkit,
                                         const PtxText& ptx_text) {
  if (side != Side::device || driver == 0) {
    auto chosen = select_for_side(side, candidates, arch, only_kind);
    if (!chosen) return chosen.error();
    return DriverChoice{*chosen, false};
  }
  std::optional<Error> blocked;  // ptx_text's WOULD_BLOCK: the selection stops there
  Loadable loadable = [&](std::size_t i) {
    if (blocked) return false;
    if (candidates[i].kind == ImageKind::cubin) return driver_loads(driver, toolkit, true, {});
    auto text = ptx_text(i);
    if (!text && is_would_block(text.error())) blocked = text.error();
    return text && driver_loads(driver, toolkit, false, *text);
  };
  auto chosen = select_for_side(side, candidates, arch, only_kind, loadable);
  if (blocked) return *blocked;
  if (!chosen) return chosen.error();
  if (chosen->has_value()) return DriverChoice{*chosen, false};
  auto unfiltered = select_for_side(side, candidates, arch, only_kind);
  return DriverChoice{std::nullopt, unfiltered && unfiltered->has_value()};
}

}  // namespace kcache
