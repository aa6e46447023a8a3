#include "compile/toolchain.hpp"

#include <llvm/Config/llvm-config.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>

#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <regex>
#include <sstream>

#include "compile/llvm_common.hpp"
#include "kcache/process.hpp"
#include "kcache/amd_target.hpp"
#include "kcache/files.hpp"
#include "kcache/headers_digest.hpp"
#include "kcache/job.hpp"
#include "kcache/rtlib.hpp"

namespace kcache::server {
namespace {

void initialise_llvm() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
    llvm::InitializeAllAsmParsers();
  });
}

bool arch_less(const std::string& a, const std::string& b) {
  auto x = parse_sm_arch(a), y = parse_sm_arch(b);
  if (x->number() != y->number()) return x->number() < y->number();
  return x->variant < y->variant;
}

std::vector<std::string> llvm_device_archs() {
  llvm::Triple triple{llvm::StringRef(k_device_triple.data(), k_device_triple.size())};
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (target == nullptr) return {};
  std::unique_ptr<llvm::MCSubtargetInfo> sti(target->createMCSubtargetInfo(triple, "", ""));
  std::vector<std::string> out;
  for (const auto& cpu : sti->getAllProcessorDescriptions()) {
    auto arch = parse_sm_arch(cpu.Key);
    if (arch && arch->number() >= 52) out.emplace_back(cpu.Key);
  }
  std::sort(out.begin(), out.end(), arch_less);
  return out;
}

struct Question {
  std::filesystem::path program;
  std::vector<std::string> args;

  std::string text() const {
    std::string question;
    for (const std::string& a : args) question += (question.empty() ? "" : " ") + a;
    return question;
  }
  Expected<ProcessResult> run() const {
    std::vector<std::string> argv = {program.string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return run_process(argv);
  }
};

// Asks `program` with `args` through `runs`.
Expected<ProcessResult> ask(ToolRuns& runs, const std::filesystem::path& program, const std::vector<std::string>& args) {
  Question q{program, args};
  return runs.ask(program, q.text(), [&] { return q.run(); });
}

// Runs at once those of `questions` that `runs` has no answer to, and keeps their answers as
// ask() does; detection then finds them known. kcached's detection asks ptxas three questions and
// ld.lld one: 160 ms of its start one after another, about as long as the slowest together. A
// worker, told kcached's answers, runs none.
void ask_at_once(ToolRuns& runs, const std::vector<Question>& questions) {
  std::vector<std::future<Expected<ProcessResult>>> answers;
  for (const Question& q : questions) {
    answers.emplace_back();
    if (std::filesystem::exists(q.program) && !runs.knows(q.program, q.text())) {
      answers.back() = std::async(std::launch::async, [&q] { return q.run(); });
    }
  }
  for (std::size_t i = 0; i < questions.size(); ++i) {
    // Kept in `runs` (a failure to run is not; detection's own ask runs it again and sees it).
    if (answers[i].valid()) (void)runs.ask(questions[i].program, questions[i].text(), [&] { return answers[i].get(); });
  }
}

// Where ld.lld may be: found at configure time beside LLVM, else PATH's usual places.
constexpr const char* k_lld_candidates[] = {KCACHE_LLD_PATH, "/usr/bin/ld.lld-22", "/usr/lib/llvm-22/bin/ld.lld"};

void detect_cuda(Toolchain& t, const std::filesystem::path& cuda_root, ToolRuns& runs) {
  t.cuda_root = cuda_root;
  std::filesystem::path ptxas = cuda_root / "bin" / "ptxas";
  if (!std::filesystem::exists(ptxas)) return;
  auto version = ask(runs, ptxas, {"--version"});
  if (!version || version->exit_code != 0) return;
  std::smatch m;
  static const std::regex release(R"(release [0-9.]+, V[0-9.]+)");
  t.ptxas_version = std::regex_search(version->output, m, release) ? m.str() : version->output;
  static const std::regex cuda_release(R"(release ([0-9]+)\.([0-9]))");
  if (std::regex_search(version->output, m, cuda_release)) {
    t.cuda_version = static_cast<CudaVersion>(std::stoi(m[1]) * 1000 + std::stoi(m[2]) * 10);
  }
  auto help = ask(runs, ptxas, {"--help"});
  if (!help || help->exit_code != 0) return;
  static const std::regex sm("'(sm_[0-9]+[af]?)'");
  for (auto it = std::sregex_iterator(help->output.begin(), help->output.end(), sm); it != std::sregex_iterator(); ++it) {
    t.cubin_archs.push_back((*it)[1]);
  }
  std::sort(t.cubin_archs.begin(), t.cubin_archs.end(), arch_less);
  // --help names its default arch (sm_75) a second time.
  t.cubin_archs.erase(std::unique(t.cubin_archs.begin(), t.cubin_archs.end()), t.cubin_archs.end());
  t.ptxas = ptxas;
  t.cuda_present = true;
  if (std::filesystem::exists(cuda_root / "lib64" / "libcudadevrt.a")) t.cudadevrt = cuda_root / "lib64" / "libcudadevrt.a";
  if (std::filesystem::exists(cuda_root / "bin" / "nvlink")) t.nvlink = cuda_root / "bin" / "nvlink";
}

void detect_libdevice(Toolchain& t, const std::filesystem::path& cuda_root) {
  std::filesystem::path path = cuda_root / "nvvm" / "libdevice" / "libdevice.10.bc";
  t.libdevice_bitcode = read_whole_file(path);
  if (!t.libdevice_bitcode.empty()) t.libdevice = path;
}

// PTX ISA versions the linked LLVM's NVPTX backend can emit (its +ptxNN features).
std::vector<int> llvm_ptx_versions() {
  llvm::Triple triple{llvm::StringRef(k_device_triple.data(), k_device_triple.size())};
  std::string error;
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (target == nullptr) return {};
  std::unique_ptr<llvm::MCSubtargetInfo> sti(target->createMCSubtargetInfo(triple, "", ""));
  std::vector<int> out;
  static const std::regex ptx("ptx([0-9]+)");
  for (const auto& feature : sti->getAllProcessorFeatures()) {
    std::cmatch m;
    std::string key = feature.Key;
    if (std::regex_match(key.c_str(), m, ptx)) out.push_back(std::stoi(m[1]));
  }
  std::sort(out.rbegin(), out.rend());
  return out;
}

// The PTX ISA versions `ptxas --list-version` names, one "major.minor" a line (CUDA 11.5 and
// later); empty where it has no such option or prints something else.
std::vector<int> listed_ptx_versions(const Toolchain& t, ToolRuns& runs) {
  auto listed = ask(runs, t.ptxas, {"--list-version"});
  std::vector<int> out;
  if (!listed || listed->exit_code != 0) return out;
  static const std::regex line(R"(([0-9]+)\.([0-9]))");
  std::istringstream in(listed->output);
  for (std::string l; std::getline(in, l);) {
    std::smatch m;
    if (!std::regex_match(l, m, line)) return {};  // not the list this code knows: probe instead
    out.push_back(std::stoi(m[1]) * 10 + std::stoi(m[2]));
  }
  return out;
}

// The newest PTX ISA that LLVM emits and ptxas accepts. ptxas lists what it accepts in one run of
// about 15 ms; a ptxas that does not is asked to parse an empty module of each version, newest
// first, at about 60 ms a run (every daemon and test start ran at least one).
int newest_common_ptx_version(const Toolchain& t, ToolRuns& runs) {
  if (!t.cuda_present) return 0;
  std::vector<int> ours = llvm_ptx_versions();
  if (std::vector<int> listed = listed_ptx_versions(t, runs); !listed.empty()) {
    for (int version : ours) {  // newest first
      if (std::find(listed.begin(), listed.end(), version) != listed.end()) return version;
    }
    return 0;
  }
  std::optional<TempDir> scratch;  // made for the first probe that runs ptxas
  for (int version : ours) {
    std::string probe = ".version " + std::to_string(version / 10) + "." + std::to_string(version % 10) +
                        "\n.target sm_75\n.address_size 64\n";
    auto r = runs.ask(t.ptxas, "-arch=sm_75 " + probe, [&]() -> Expected<ProcessResult> {
      if (!scratch) scratch.emplace();
      const std::filesystem::path& dir = scratch->path();
      if (dir.empty()) return make_error(ErrorCode::k_internal, "no scratch folder for the PTX probe");
      {
        std::ofstream f(dir / "probe.ptx");
        f << probe;
      }
      return run_process({t.ptxas.string(), "-arch=sm_75", "-o", (dir / "probe.cubin").string(), (dir / "probe.ptx").string()});
    });
    if (r && r->exit_code == 0) return version;
  }
  return 0;
}

// LLVM's AMDGPU backend, ld.lld (found at configure time beside LLVM; else on PATH's usual
// places), and ROCm's device libraries (--rocm-device-libs; else Debian's rocm-device-libs, else
// /opt/rocm's).
void detect_amdgpu(Toolchain& t, const std::filesystem::path& rocm_device_libs, ToolRuns& runs) {
  llvm::Triple triple{llvm::StringRef(k_amd_device_triple.data(), k_amd_device_triple.size())};
  std::string error;
  t.amdgpu_present = llvm::TargetRegistry::lookupTarget(triple, error) != nullptr;
  for (const char* candidate : k_lld_candidates) {
    if (std::string_view(candidate).empty() || !std::filesystem::exists(candidate)) continue;
    auto version = ask(runs, candidate, {"--version"});
    if (!version || version->exit_code != 0) continue;
    t.lld = candidate;
    t.lld_version = version->output.substr(0, version->output.find('\n'));
    break;
  }
  std::vector<std::filesystem::path> folders = {KCACHE_ROCM_DEVICE_LIBS_DIR, "/opt/rocm/amdgcn/bitcode"};
  if (!rocm_device_libs.empty()) folders = {rocm_device_libs};  // the operator's, and no other
  for (const std::filesystem::path& folder : folders) {
    if (folder.empty()) continue;
    std::string ocml = read_whole_file(folder / "ocml.bc"), ockl = read_whole_file(folder / "ockl.bc");
    if (ocml.empty() || ockl.empty()) continue;
    t.rocm_device_libs = folder;
    // hip.bc is HIP's own device library (__atomic_work_item_fence, behind __syncthreads and
    // __threadfence); a folder without it still serves OpenCL-style and Julia modules.
    t.hip_bitcode = read_whole_file(folder / "hip.bc");
    t.rocm_device_libs_digest = sha256_hex(ocml) + sha256_hex(ockl) +
                                (t.hip_bitcode.empty() ? std::string("hip.bc absent") : sha256_hex(t.hip_bitcode));
    t.ocml_bitcode = std::move(ocml);
    t.ockl_bitcode = std::move(ockl);
    break;
  }
}

void hash_part(Sha256& h, std::string_view name, std::string_view value) {
  h.update(name);
  h.update("=");
  h.update(value);
  h.update(std::string_view("\0", 1));
}

}  // namespace

std::optional<FileIdentity> file_identity(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  auto ns = [](const timespec& t) { return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec; };
  return FileIdentity{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
                      static_cast<std::uint64_t>(st.st_size), ns(st.st_mtim), ns(st.st_ctim)};
}

namespace {
const ToolRun* known_run(const std::vector<ToolRun>& runs, const std::filesystem::path& program,
                         std::string_view question, const FileIdentity& identity) {
  for (const ToolRun& known : runs) {
    if (known.program == program.string() && known.question == question && known.identity == identity) return &known;
  }
  return nullptr;
}
}  // namespace

bool ToolRuns::knows(const std::filesystem::path& program, std::string_view question) const {
  std::optional<FileIdentity> identity = file_identity(program);
  return identity && known_run(m_runs, program, question, *identity) != nullptr;
}

Expected<ProcessResult> ToolRuns::ask(const std::filesystem::path& program, std::string_view question,
                                      const std::function<Expected<ProcessResult>()>& run) {
  std::optional<FileIdentity> identity = file_identity(program);
  if (!identity) return run();  // nothing to know it by
  if (const ToolRun* known = known_run(m_runs, program, question, *identity)) {
    return ProcessResult{known->exit_code, 0, known->output, {}};
  }
  auto result = run();
  if (!result) return result;
  // Kept only when the file did not change while it ran (the answer is then that file's) and the
  // program was not killed (an accident of that run, not an answer).
  if (result->signal == 0 && file_identity(program) == identity) {
    m_runs.push_back({program.string(), *identity, std::string(question), result->exit_code, result->output});
  }
  return result;
}

std::string assembler_name(const Toolchain& t) {
  if (!t.cuda_present) return "none";
  return t.nvjitlink_version.empty() ? "ptxas" : "nvJitLink " + t.nvjitlink_version;
}

Digest toolchain_fingerprint(const Toolchain& t) {
  // Only what shapes device output: the host triple is left out, so daemons on x86-64 and
  // aarch64 with the same versions share device keys. A host job's key carries the triple
  // itself (KEY_FORMAT.md tag 5).
  Sha256 h;
  hash_part(h, "pipeline", std::to_string(k_pipeline_version));
  hash_part(h, "llvm", t.llvm_version);
  hash_part(h, "rtlib", t.rtlib_digest);
  hash_part(h, "ptxas", t.cuda_present ? t.ptxas_version : "absent");
  hash_part(h, "ptx", std::to_string(t.max_ptx_version));
  hash_part(h, "assembler", assembler_name(t));
  hash_part(h, "cudadevrt", t.cudadevrt.empty() ? "absent" : "present");
  hash_part(h, "libdevice", t.libdevice.empty() ? "absent" : sha256_hex(t.libdevice_bitcode));
  hash_part(h, "nvrtc", t.nvrtc_version.empty() ? "absent" : t.nvrtc_version + " " + t.cuda_headers_digest);
  // AMD: the assembler that links code objects and ROCm's device libraries. In every key, as the
  // NVIDIA parts are in AMD keys: one fingerprint per daemon, compared as a whole by clients.
  hash_part(h, "amdgpu", t.amdgpu_present ? "present" : "absent");
  hash_part(h, "lld", t.lld.empty() ? "absent" : t.lld_version);
  hash_part(h, "rocm-device-libs", t.rocm_device_libs.empty() ? "absent" : t.rocm_device_libs_digest);
  return h.finish();
}

bool assembler_by_workers(const Toolchain& t, CubinAssembler assembler) {
  return t.cuda_present && assembler != CubinAssembler::ptxas;
}

Toolchain detect_toolchain(const std::filesystem::path& cuda_root, CubinAssembler assembler, ToolkitLibraries load,
                           const std::filesystem::path& rocm_device_libs, ToolRuns* runs) {
  ToolRuns own;
  if (runs == nullptr) runs = &own;
  initialise_llvm();
  Toolchain t;
  t.llvm_version = LLVM_VERSION_STRING;
  t.host_triple = llvm::Triple::normalize(llvm::sys::getDefaultTargetTriple());
  t.rtlib_digest = rtlib::rtlib_digest();
  t.device_archs = llvm_device_archs();
  std::vector<Question> questions;
  for (const char* args : {"--version", "--help", "--list-version"}) questions.push_back({cuda_root / "bin" / "ptxas", {args}});
  for (const char* candidate : k_lld_candidates) {
    if (std::string_view(candidate).empty() || !std::filesystem::exists(candidate)) continue;
    questions.push_back({candidate, {"--version"}});
    break;
  }
  ask_at_once(*runs, questions);
  detect_cuda(t, cuda_root, *runs);
  detect_libdevice(t, cuda_root);
  detect_amdgpu(t, rocm_device_libs, *runs);
  if (load == ToolkitLibraries::load && assembler_by_workers(t, assembler)) {
    t.nvjitlink = NvJitLink::open(cuda_root);
    if (t.nvjitlink) t.nvjitlink_version = t.nvjitlink->version();
  }
  if (t.cuda_present) {
    for (const char* dir : {"include", "include/cccl"}) {
      if (std::filesystem::is_directory(cuda_root / dir)) t.cuda_include_dirs.push_back(cuda_root / dir);
    }
    t.cuda_headers_digest = cuda_headers_digest(t.cuda_include_dirs);
    if (load == ToolkitLibraries::load) {
      t.nvrtc = Nvrtc::open(cuda_root);
      if (t.nvrtc) t.nvrtc_version = t.nvrtc->version();
    }
  }
  t.max_ptx_version = newest_common_ptx_version(t, *runs);

  t.fingerprint = toolchain_fingerprint(t);
  return t;
}

JailPolicy jail_policy(const Toolchain& toolchain, std::uint64_t memory_limit) {
  JailPolicy policy;
  if (!toolchain.cuda_root.empty()) policy.read_only.push_back(toolchain.cuda_root);
  // Each program's installation (bin/..), the clang build steps run (the LLVM kcached was built
  // with) among them; under /usr/lib on Debian, which the jail binds anyway.
  const std::filesystem::path clang = KCACHE_CLANG_PATH;
  for (const std::filesystem::path& program : {toolchain.ptxas, toolchain.nvlink, toolchain.lld, clang}) {
    std::error_code ec;
    std::filesystem::path real = program.empty() ? program : std::filesystem::canonical(program, ec);
    if (!ec && !real.empty()) policy.read_only.push_back(real.parent_path().parent_path());
  }
  policy.max_memory_bytes = memory_limit;
  return policy;
}

Expected<ProcessResult> run_tool(const Toolchain& toolchain, const std::vector<std::string>& argv,
                                 const std::filesystem::path& folder, ProcessOptions options) {
  static const Jail k_unjailed = Jail::none("the daemon's own runs");
  return (toolchain.jail ? *toolchain.jail : k_unjailed).run(argv, folder, std::move(options));
}

}  // namespace kcache::server
