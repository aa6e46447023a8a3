// libFuzzer target: the module input path a worker runs, in process: format inference, parsing
// and verifying IR (text or bitcode), the device checks (rtlib signatures, kernels, undefined
// symbols) and codegen at -O0, or the host guard and codegen; PTX input stops at the toolkit
// check, since ptxas is not ours to fuzz. The first byte picks the side; the rest is the module.
// Any input must end in images or a clean Error.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string_view>

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
  const kcache::server::Toolchain& t = g_compiler->toolchain();
  if (!kcache::canonicalize(spec, t.host_triple)) return 0;
  kcache::server::CompileJob job{spec, {module}, {}};
  auto images = kcache::plan_images(spec, {"sm_80"},
                                    {spec.format == kcache::InputFormat::ptx ? kcache::ImageKind::cubin
                                                                             : kcache::ImageKind::ptx});
  if (!images) return 0;
  job.images = *images;
  try {
    auto output = g_compiler->compile(job);
    if (output && output->images.size() != job.images.size()) __builtin_trap();
  } catch (const std::bad_alloc&) {
    // The worker's memory limit: RESOURCE_EXHAUSTED, tested in tests/integration/isolation_test.
  }
  return 0;
}
