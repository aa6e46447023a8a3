// Choosing the image of a key that a device can load, with CUDA's compatibility rules. Shared by
// the server's Fetch and by clients that pick from a Lookup.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>

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
// no cubins from a newer toolkit, no PTX above the ISA it JITs); others are passed over.
using Loadable = std::function<bool(std::size_t)>;
std::optional<Selection> select_image(std::span<const ImageRequest> candidates, const SmArch& device,
                                      std::optional<ImageKind> only_kind = std::nullopt, const Loadable& loadable = {});

// Selection for either side, from the arch as a request names it: device archs by the rules
// above (INVALID_ARGUMENT when `arch` is not an sm_XX); host images by their CPU arch, an empty
// arch taking the key's one object. nullopt when nothing fits.
Expected<std::optional<Selection>> select_for_side(Side side, std::span<const ImageRequest> candidates,
                                                   const std::string& arch, std::optional<ImageKind> only_kind,
                                                   const Loadable& loadable = {});

}  // namespace kcache
