// The release definition of the fault hook: nothing happens (see fault_hook.hpp).
#include "worker/fault_hook.hpp"

namespace kcache::server::worker {

void fault_hook(const CompileJob&) {}

}  // namespace kcache::server::worker
