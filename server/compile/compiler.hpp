// The compile pipelines. Only this folder includes LLVM. A Compiler is immutable after
// construction and thread-safe: every compile makes its own LLVMContext and TargetMachine.
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "compile/toolchain.hpp"
#include "image.hpp"
#include "kcache/expected.hpp"
#include "kcache/job.hpp"

namespace kcache::server {

struct CompileJob {
  JobSpec spec;                           // canonical
  std::vector<std::string_view> modules;  // the module bytes, one per spec.module_count(), in order
  std::vector<ImageRequest> images;  // what to produce, in order
  // CUDA C++ jobs: the headers the source includes, (include name, bytes), as the client sent them.
  std::vector<std::pair<std::string_view, std::string_view>> headers = {};
  // Child processes (ptxas, nvlink) still running then are killed. LLVM itself runs in process
  // and cannot be stopped part-way; isolated workers will bound it too.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // The CPUs lent to this job (worker/cpus.hpp): its worker pins itself to them, so the cubin
  // assembler's split compile (cubin.cpp) takes those cores and no others; empty: any. The cubin
  // is the same bytes whatever was lent (tests/unit/nvptx_pipeline_test.cpp), so it is no part of
  // the key.
  std::vector<unsigned> cpus = {};
};

struct CompileOutput {
  std::vector<Image> images;             // one per CompileJob::images, same order
  std::vector<std::string> diagnostics;  // warnings from LLVM and ptxas, verbatim
};

// A device job's images in at most `parts` jobs, one or more whole archs each (an arch's PTX and
// cubin share one PTX, so they stay together), for workers to compile at once. Images keep their
// order within each part; a host job, or `parts` < 2, stays one job.
std::vector<CompileJob> split_by_arch(const CompileJob& job, std::size_t parts);

// The outputs of split_by_arch's parts as one, images in `job`'s order: the first part's error
// (in part order) if any failed.
Expected<CompileOutput> merge_parts(const CompileJob& job, std::vector<Expected<CompileOutput>> parts);

class Compiler {
 public:
  explicit Compiler(Toolchain toolchain) : m_toolchain(std::move(toolchain)) {}

  const Toolchain& toolchain() const { return m_toolchain; }

  // Refuses, before any work, images this toolchain cannot make: archs LLVM does not know,
  // cubin without ptxas or for an arch ptxas does not take, PTX sent as host code.
  Expected<void> check_supported(const JobSpec& spec, const std::vector<ImageRequest>& images) const;

  Expected<CompileOutput> compile(const CompileJob& job) const;

 private:
  Toolchain m_toolchain;
};

// LLVM reports an allocation that fails (a hostile module of a few bytes can ask for gigabytes,
// found by fuzz/module_fuzzer) to its bad-alloc handler, which aborts by default. This one throws
// std::bad_alloc instead, which a worker turns into RESOURCE_EXHAUSTED and a fresh worker.
void throw_bad_alloc_from_llvm();

// LLVM stops on what a target cannot do with a fatal error (SelectionDAG's "Cannot select" for an
// intrinsic of another GPU generation, such as MFMA on gfx1100), which exits the process by
// default. This handler throws LlvmFatalError instead: the worker answers INVALID_ARGUMENT with
// LLVM's words and leaves for a fresh worker, since LLVM's state after it is undefined.
struct LlvmFatalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void throw_fatal_errors_from_llvm();

}  // namespace kcache::server
