#include "compile/toolchain.hpp"

#include <llvm/Config/llvm-config.h>
#include <llvm/MC/MCSubtargetInfo.h>
#include <llvm/MC/TargetRegistry.h>
#include <llvm/Support/TargetSelect.h>
#include <llvm/TargetParser/Host.h>
#include <llvm/TargetParser/Triple.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <regex>

#include "compile/process.hpp"
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

void detect_cuda(Toolchain& t, const std::filesystem::path& cuda_root) {
  t.cuda_root = cuda_root;
  std::filesystem::path ptxas = cuda_root / "bin" / "ptxas";
  if (!std::filesystem::exists(ptxas)) return;
  auto version = run_process({ptxas.string(), "--version"});
  if (!version || version->exit_code != 0) return;
  std::smatch m;
  static const std::regex release(R"(release [0-9.]+, V[0-9.]+)");
  t.ptxas_version = std::regex_search(version->output, m, release) ? m.str() : version->output;
  auto help = run_process({ptxas.string(), "--help"});
  if (!help || help->exit_code != 0) return;
  static const std::regex sm("'(sm_[0-9]+[af]?)'");
  for (auto it = std::sregex_iterator(help->output.begin(), help->output.end(), sm); it != std::sregex_iterator(); ++it) {
    t.cubin_archs.push_back((*it)[1]);
  }
  std::sort(t.cubin_archs.begin(), t.cubin_archs.end(), arch_less);
  t.ptxas = ptxas;
  t.cuda_present = true;
}

void hash_part(Sha256& h, std::string_view name, std::string_view value) {
  h.update(name);
  h.update("=");
  h.update(value);
  h.update(std::string_view("\0", 1));
}

}  // namespace

Toolchain detect_toolchain(const std::filesystem::path& cuda_root) {
  initialise_llvm();
  Toolchain t;
  t.llvm_version = LLVM_VERSION_STRING;
  t.host_triple = llvm::Triple::normalize(llvm::sys::getDefaultTargetTriple());
  t.rtlib_digest = rtlib::rtlib_digest();
  t.device_archs = llvm_device_archs();
  detect_cuda(t, cuda_root);

  Sha256 h;
  hash_part(h, "pipeline", std::to_string(k_pipeline_version));
  hash_part(h, "llvm", t.llvm_version);
  hash_part(h, "host", t.host_triple);
  hash_part(h, "rtlib", t.rtlib_digest);
  hash_part(h, "ptxas", t.cuda_present ? t.ptxas_version : "absent");
  t.fingerprint = h.finish();
  return t;
}

}  // namespace kcache::server
