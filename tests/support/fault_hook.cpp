// The test build's fault hook (see server/worker/fault_hook.hpp), linked into kcached-faults
// only. A module naming one of these markers makes its worker fail that way:
//   kcache_test_fault_crash  SIGSEGV
//   kcache_test_fault_hang   never returns (until the job deadline kills it)
//   kcache_test_fault_oom    allocates until the worker's memory limit stops it
//   kcache_test_fault_exit   exits at once, status 3
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "worker/fault_hook.hpp"

namespace kcache::server::worker {

void fault_hook(const CompileJob& job) {
  auto named = [&](std::string_view marker) { return job.modules.at(0).find(marker) != std::string_view::npos; };
  if (named("kcache_test_fault_crash")) {
    ::signal(SIGSEGV, SIG_DFL);
    ::raise(SIGSEGV);
  }
  if (named("kcache_test_fault_exit")) ::_exit(3);
  if (named("kcache_test_fault_hang")) {
    for (;;) ::pause();
  }
  if (named("kcache_test_fault_oom")) {
    std::vector<std::unique_ptr<char[]>> hog;
    for (;;) {
      constexpr std::size_t k_chunk = 64ULL << 20;
      hog.emplace_back(new char[k_chunk]);
      // The limit is on address space (RLIMIT_AS), which `new` reaches without touching every
      // page; touching all 2 GiB took longer than the test's job time limit on a loaded machine.
      hog.back()[0] = 1;
    }
  }
}

}  // namespace kcache::server::worker
