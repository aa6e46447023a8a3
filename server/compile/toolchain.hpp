// What this daemon compiles with, detected once at start-up, and its fingerprint: the hash that
// enters every key, so a toolchain change never serves an image another toolchain made.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compile/jail.hpp"
#include "compile/nvjitlink.hpp"
#include "compile/nvrtc.hpp"
#include "kcache/process.hpp"
#include "kcache/driver.hpp"
#include "kcache/sha256.hpp"

namespace kcache::server {

// Bumped whenever the pipelines change what they emit for the same input.
inline constexpr int k_pipeline_version = 3;  // 2: libraries linked lazily (function order), AMDGPU; 3: cubins assembled with a split compile (cubin.cpp)

// What assembles PTX to cubin: nvJitLink in process where the toolkit has it, else ptxas.
enum class CubinAssembler { automatic, nvjitlink, ptxas };

struct Toolchain {
  std::string llvm_version;
  std::string host_triple;
  std::string rtlib_digest;
  std::vector<std::string> device_archs;  // sm_XX the linked LLVM's NVPTX backend knows (sm_52 up)

  bool cuda_present = false;              // ptxas found and runs
  std::filesystem::path cuda_root;
  std::filesystem::path ptxas;
  std::string ptxas_version;              // the version line ptxas prints
  CudaVersion cuda_version = 0;           // the toolkit's CUDA release (13000), from that line; 0: unknown
  std::vector<std::string> cubin_archs;   // sm_XX ptxas accepts
  std::shared_ptr<const NvJitLink> nvjitlink;  // set when cubins are assembled in this process
  std::string nvjitlink_version;          // "13.0" when cubins are assembled by nvJitLink; "": by ptxas
  std::shared_ptr<const Nvrtc> nvrtc;     // CUDA C++ source jobs; set in processes that compile
  std::string nvrtc_version;              // "13.0" where the toolkit has a usable NVRTC; "": none
  // Where the tools run on peers' bytes (build steps, ptxas, nvlink, ld.lld): set in the workers;
  // null in the daemon, whose own runs (detection) are of its own files.
  std::shared_ptr<const Jail> jail;
  std::vector<std::filesystem::path> cuda_include_dirs;  // the toolkit's headers NVRTC may include
  std::string cuda_headers_digest;        // of the toolkit's header set (cuda_headers_digest)
  int max_ptx_version = 0;                // newest PTX ISA (e.g. 90 for 9.0) LLVM and ptxas both take; 0: no ptxas

  std::filesystem::path cudadevrt;        // lib64/libcudadevrt.a (dynamic parallelism), empty when absent
  std::filesystem::path nvlink;           // bin/nvlink (links relocatable cubins when ptxas assembles)

  std::filesystem::path libdevice;        // nvvm/libdevice/libdevice.10.bc, empty when absent
  std::string libdevice_bitcode;          // its bytes, read once

  // AMD GPUs (compile/amdgpu_pipeline.hpp).
  bool amdgpu_present = false;            // the linked LLVM has its AMDGPU backend
  std::filesystem::path lld;              // ld.lld, which links HSA code objects; empty when absent
  std::string lld_version;                // the version line it prints
  std::filesystem::path rocm_device_libs; // the folder holding ocml.bc and ockl.bc; empty when absent
  std::string ocml_bitcode, ockl_bitcode; // their bytes, read once
  std::string hip_bitcode;                // hip.bc (HIP's __syncthreads and fences); empty when absent
  std::string rocm_device_libs_digest;    // of all three ("hip.bc absent" where it is)

  Digest fingerprint{};
};

// What replacing or rewriting a file changes (ccache's compiler check reads the same): its
// device, inode, size, and modification and status-change times.
struct FileIdentity {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};

// The identity of the file at `path` (symbolic links followed); nullopt where it cannot be read.
std::optional<FileIdentity> file_identity(const std::filesystem::path& path);

// One run of a toolchain program during detection: the program, its file's identity then, what it
// was asked (its arguments, or the input a probe gave it) and how it answered.
struct ToolRun {
  std::string program;
  FileIdentity identity;
  std::string question;
  int exit_code = -1;
  std::string output;
};

// The answers of the toolchain programs (ptxas, ld.lld) a detection ran. kcached detects with none
// known and hands what it learnt to each worker, whose detection runs a program again only where
// its file is no longer the one kcached ran: a toolkit replaced or rewritten under the daemon is
// asked afresh, so the worker's fingerprint shows the change and kcached refuses the worker.
class ToolRuns {
 public:
  ToolRuns() = default;
  explicit ToolRuns(std::vector<ToolRun> known) : m_runs(std::move(known)) {}

  // What `program` answers to `question`: a known answer of the same file, else what `run`
  // returns, which is then known. A failure to run is returned and not kept.
  Expected<ProcessResult> ask(const std::filesystem::path& program, std::string_view question,
                              const std::function<Expected<ProcessResult>()>& run);
  // Whether `program`, as its file is now, has answered `question`.
  bool knows(const std::filesystem::path& program, std::string_view question) const;
  const std::vector<ToolRun>& runs() const { return m_runs; }

 private:
  std::vector<ToolRun> m_runs;
};

// Whether detect_toolchain loads the toolkit's libraries (nvJitLink, NVRTC). A process that
// compiles does. kcached itself only describes the toolchain: its workers compile, and the
// libraries would stay mapped in the daemon for good (~26 MiB resident for nvJitLink alone,
// RTLD_NODELETE). It asks its first worker instead (`by_workers`: nvjitlink_version and
// nvrtc_version stay empty, and the daemon fills them in and recomputes the fingerprint from the
// worker's hello).
enum class ToolkitLibraries { load, by_workers };


// Detects LLVM, the CUDA toolkit under `cuda_root` (absent is fine) and rtlib, and computes the
// fingerprint. Initialises LLVM's targets on first use.
// ROCm's device libraries come from `rocm_device_libs` where given, else from Debian's
// rocm-device-libs folder or /opt/rocm's. Programs are asked through `runs` where given (known
// answers of unchanged files are reused, new ones added), else run.
Toolchain detect_toolchain(const std::filesystem::path& cuda_root,
                           CubinAssembler assembler = CubinAssembler::automatic,
                           ToolkitLibraries load = ToolkitLibraries::load,
                           const std::filesystem::path& rocm_device_libs = {}, ToolRuns* runs = nullptr);

// Whether detect_toolchain(.., by_workers) left the assembler for a worker to report.
bool assembler_by_workers(const Toolchain& toolchain, CubinAssembler assembler);

// The fingerprint of `toolchain` (KEY_FORMAT.md): every part that shapes what the pipelines
// emit, and not the host triple.
Digest toolchain_fingerprint(const Toolchain& toolchain);

// "nvJitLink 13.0", "ptxas", or "none".
std::string assembler_name(const Toolchain& toolchain);

// What the jail binds read-only for this toolchain's tools (the toolkit's folders) and bounds
// them by (`memory_limit`: a worker's address space, 0 for none).
JailPolicy jail_policy(const Toolchain& toolchain, std::uint64_t memory_limit);

// Runs one of the toolchain's tools on a peer's files in `folder`: in its jail where it has one.
Expected<ProcessResult> run_tool(const Toolchain& toolchain, const std::vector<std::string>& argv,
                                 const std::filesystem::path& folder, ProcessOptions options);

}  // namespace kcache::server
