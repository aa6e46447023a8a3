// Fault injection for the isolation tests. A worker calls fault_hook() before every compile.
// kcached links the empty definition (server/worker/no_fault_hook.cpp, the archive
// kcache_no_fault_hook that comes with kcache_server); only the test build of
// the daemon, kcached-faults (tests/support/fault_hook.cpp), links one that crashes, hangs or
// exhausts memory on request, so a release binary cannot be made to fault this way.
#pragma once

#include "compile/compiler.hpp"

namespace kcache::server::worker {

void fault_hook(const CompileJob& job);

}  // namespace kcache::server::worker
