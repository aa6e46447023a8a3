// Choosing the image of a key that a device can load, with CUDA's compatibility rules. Shared by
// the server's Fetch and by clients that pick from a Lookup.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include "kcache/amd_target.hpp"
#include "kcache/driver.hpp"
#include "kcache/expected.hpp"
#include "kcache/job.hpp"

namespace kcache {

struct Selection {
  std::size_t index = 0;   // into the candidates
  bool needs_jit = false;  // PTX: the driver compiles it for the device at load time
};

// Picks among `candidates` for a device of arch `device`:
//   1. a cubin for exactly that arch (then an arch-specific sm_XYa/f cubin of the same X.Y);
//   2. else a cubin of the same major and a lower minor, the highest such; never a variant;
//   3. else the PTX of the highest arch not above the device (variants only for the same X.Y),
//      marked needs_jit;
//   4. else nullopt.
// `only_kind` restricts the choice to one kind.
// `loadable`, when given, says whether the client's driver loads candidate i (kcache/driver.hpp:
// no cubins from a newer toolkit, no PTX above the ISA it JITs); others are passed over. It is
// asked only about a cubin or PTX that these rules would otherwise take.
using Loadable = std::function<bool(std::size_t)>;
std::optional<Selection> select_image(std::span<const ImageRequest> candidates, const SmArch& device,
                                      std::optional<ImageKind> only_kind = std::nullopt, const Loadable& loadable = {});

// Picks among `candidates` for an AMD device described by target ID `device`
// (kcache/amd_target.hpp):
//   1. the hsaco for exactly that target ID;
//   2. else an hsaco for the same processor whose settings the device meets (an image that
//      leaves xnack or sramecc unspecified runs with it on or off; one that fixes it runs only
//      where the device has the same), the most specific first;
//   3. else the hsaco of the processor's generic target (gfx11-generic for gfx1100), by the same
//      settings rule;
//   4. else nullopt.
// amdgcn assembly is nobody's to load: fetched only when asked for by kind, for its exact target.
std::optional<Selection> select_amd_image(std::span<const ImageRequest> candidates, const AmdTarget& device,
                                          std::optional<ImageKind> only_kind = std::nullopt);

// Selection for either side, from the arch as a request names it: device archs by the rules
// above, NVIDIA's or AMD's as the arch names one (INVALID_ARGUMENT when `arch` is neither an sm_XX
// nor a valid AMD target ID); host images by their CPU arch, an empty
// arch taking the key's one object. nullopt when nothing fits.
Expected<std::optional<Selection>> select_for_side(Side side, std::span<const ImageRequest> candidates,
                                                   const std::string& arch, std::optional<ImageKind> only_kind,
                                                   const Loadable& loadable = {});

// What select_for_side chooses for a client whose driver is `driver` (0: not stated, no filter):
// the choice, or, when nothing fits, whether something would have fitted a newer driver.
struct DriverChoice {
  std::optional<Selection> chosen;
  bool driver_too_old = false;  // nothing chosen, but an image for the arch exists that `driver` cannot load
};
// `ptx_text(i)`: candidate i's PTX text, which need stay valid only until the next call (asked
// only for PTX candidates, only when driver != 0). A WOULD_BLOCK error it returns ends the
// selection and is this function's error (the daemon's event threads then ask again where they
// may wait); any other error means the PTX cannot be read, and it is passed over as one the
// driver cannot load.
using PtxText = std::function<Expected<std::string_view>(std::size_t)>;
// The driver filter applies to Side::device and NVIDIA archs only: a cubin loads where
// driver_loads_cubins_of(driver, toolkit) (`toolkit`, the CUDA version that made the cubins; 0:
// unknown, taken as loadable), a PTX where its .version is at most what `driver` JITs. Errors as
// select_for_side's, and ptx_text's WOULD_BLOCK.
Expected<DriverChoice> select_for_driver(Side side, std::span<const ImageRequest> candidates, const std::string& arch,
                                         std::optional<ImageKind> only_kind, CudaVersion driver, CudaVersion toolkit,
                                         const PtxText& ptx_text);

}  // namespace kcache
