// libFuzzer target: the module input path a worker runs, in process: format inference, parsing
// and verifying IR (text or bitcode), the device checks (rtlib signatures, kernels, undefined
// symbols) and codegen at -O0 for NVPTX or AMDGPU (assembly: no ld.lld process), or the host
// guard and codegen; PTX input stops at the toolkit check, since ptxas is not ours to fuzz. The
// first byte picks the side, the policy and the GPU vendor; the rest is the module. Any input
// must end in images or a clean Error (or, as in a worker, an LLVM fatal error caught).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "compile/compiler.hpp"

namespace {

std::unique_ptr<kcache::server::Compiler> g_compiler;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // No toolkit: PTX only, no child processes, the same on every machine.
  g_compiler = std::make_unique<kcache::server::Compiler>(kcache::server::detect_toolchain("/nonexistent/cuda"));
  // As in a worker: an allocation LLVM cannot make is std::bad_alloc, which the worker reports
  // as RESOURCE_EXHAUSTED (run with ASAN_OPTIONS=allocator_may_return_null=1 so it happens).
  kcache::server::throw_bad_alloc_from_llvm();
  kcache::server::throw_fatal_errors_from_llvm();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const bool host = (data[0] & 1) != 0;
  std::string_view module(reinterpret_cast<const char*>(data + 1), size - 1);
  kcache::JobSpec spec;
  spec.side = host ? kcache::Side::host : kcache::Side::device;
  spec.format = kcache::infer_format(module);
  spec.options.opt_level = 0;
  spec.options.guard = (data[0] & 2) != 0 ? kcache::HostGuard::stub : kcache::HostGuard::reject;
  const bool amd = !host && (data[0] & 4) != 0;
  const std::vector<std::string> archs = {amd ? ((data[0] & 8) != 0 ? "gfx90a:xnack-" : "gfx1100") : "sm_80"};
  if (amd) spec.target = kcache::implied_device_target(archs);
  const kcache::server::Toolchain& t = g_compiler->toolchain();
  if (!kcache::canonicalize(spec, t.host_triple)) return 0;
  kcache::server::CompileJob job{spec, {module}, {}};
  kcache::ImageKind kind = amd ? kcache::ImageKind::amdgcn
                               : spec.format == kcache::InputFormat::ptx ? kcache::ImageKind::cubin : kcache::ImageKind::ptx;
  auto images = kcache::plan_images(spec, host ? std::vector<std::string>{} : archs, {host ? kcache::ImageKind::object : kind});
  if (!images) return 0;
  job.images = *images;
  try {
    auto output = g_compiler->compile(job);
    if (output && output->images.size() != job.images.size()) __builtin_trap();
  } catch (const std::bad_alloc&) {
    // The worker's memory limit: RESOURCE_EXHAUSTED, tested in tests/integration/isolation_test.
  } catch (const kcache::server::LlvmFatalError&) {
    // What the target cannot do: INVALID_ARGUMENT and a fresh worker (tests/integration/amd_test).
    // Unwinding out of LLVM leaks what it held, which is why the worker leaves; LeakSanitizer
    // reports it, so no seed takes this path (mutation runs: -detect_leaks=0 to go past one).
  }
  return 0;
}
