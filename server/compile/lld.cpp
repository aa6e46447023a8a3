#include "compile/lld.hpp"

#include <llvm/BinaryFormat/ELF.h>
#include <llvm/BinaryFormat/MsgPackDocument.h>
#include <llvm/Object/ELFObjectFile.h>
#include <llvm/Support/Error.h>
#include <llvm/Support/MemoryBuffer.h>

#include <fstream>

#include "compile/llvm_common.hpp"
#include "kcache/process.hpp"

namespace kcache::server {
namespace {

Error internal(std::string message) { return make_error(ErrorCode::k_internal, std::move(message)); }

std::uint64_t number(llvm::msgpack::MapDocNode& map, llvm::StringRef field) {
  auto it = map.find(map.getDocument()->getNode(field));
  if (it == map.end()) return 0;
  llvm::msgpack::DocNode& node = it->second;
  if (node.getKind() == llvm::msgpack::Type::UInt) return node.getUInt();
  if (node.getKind() == llvm::msgpack::Type::Int && node.getInt() >= 0) return static_cast<std::uint64_t>(node.getInt());
  return 0;
}

}  // namespace

Expected<std::string> link_hsaco(const Toolchain& toolchain, std::string_view object, const std::string& target,
                                 std::chrono::steady_clock::time_point deadline) {
  if (toolchain.lld.empty()) {
    return make_error(ErrorCode::k_failed_precondition,
                      "hsaco needs ld.lld to link the code object, and this kcached found none (install lld-22); ask "
                      "for amdgcn assembly instead");
  }
  TempDir dir;
  if (dir.path().empty()) return internal("cannot create a scratch folder for ld.lld");
  std::filesystem::path in = dir.path() / "module.o", out = dir.path() / "module.hsaco";
  {
    std::ofstream f(in, std::ios::binary);
    f.write(object.data(), static_cast<std::streamsize>(object.size()));
    if (!f) return internal("cannot write " + in.string());
  }
  // --no-undefined: a code object is loaded whole; nothing may stay for a later link.
  ProcessOptions options;
  options.deadline = deadline;
  options.kill_past_max_output = true;
  auto run = run_tool(toolchain, {toolchain.lld.string(), "-flavor", "gnu", "-m", "elf64_amdgpu", "--no-undefined",
                                  "-shared", "-o", out.string(), in.string()},
                      dir.path(), options);
  if (!run) return run.error();
  if (run->exit_code != 0) {
    return internal(run->signal != 0 ? "ld.lld was killed by signal " + std::to_string(run->signal)
                                     : "ld.lld could not link the code object for " + target + ":\n" + run->output);
  }
  std::ifstream f(out, std::ios::binary);
  std::string hsaco((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (hsaco.empty()) return internal("ld.lld wrote no code object for " + target);
  return hsaco;
}

Expected<std::vector<KernelInfo>> hsaco_kernels(std::string_view hsaco) {
  auto buffer = llvm::MemoryBufferRef(llvm::StringRef(hsaco.data(), hsaco.size()), "code object");
  auto file = llvm::object::ELF64LEObjectFile::create(buffer);
  if (!file) return internal("the code object is not a 64-bit ELF: " + llvm::toString(file.takeError()));
  const auto& elf = file->getELFFile();
  if (elf.getHeader().e_machine != llvm::ELF::EM_AMDGPU) return internal("the code object's e_machine is not EM_AMDGPU");
  auto sections = elf.sections();
  if (!sections) return internal("the code object's sections do not read: " + llvm::toString(sections.takeError()));
  std::vector<KernelInfo> out;
  for (const auto& section : *sections) {
    if (section.sh_type != llvm::ELF::SHT_NOTE) continue;
    llvm::Error error = llvm::Error::success();
    for (const auto& note : elf.notes(section, error)) {
      if (note.getName() != "AMDGPU" || note.getType() != llvm::ELF::NT_AMDGPU_METADATA) continue;
      llvm::ArrayRef<std::uint8_t> desc = note.getDesc(section.sh_addralign);
      llvm::msgpack::Document doc;
      if (!doc.readFromBlob(llvm::StringRef(reinterpret_cast<const char*>(desc.data()), desc.size()), false)) {
        return internal("the code object's amdhsa metadata note is not MessagePack");
      }
      if (doc.getRoot().getKind() != llvm::msgpack::Type::Map) return internal("the amdhsa metadata is not a map");
      auto& root = doc.getRoot().getMap();
      auto kernels = root.find(doc.getNode("amdhsa.kernels"));
      if (kernels == root.end() || kernels->second.getKind() != llvm::msgpack::Type::Array) continue;
      for (llvm::msgpack::DocNode& node : kernels->second.getArray()) {
        if (node.getKind() != llvm::msgpack::Type::Map) continue;
        auto& kernel = node.getMap();
        auto name = kernel.find(doc.getNode(".name"));
        if (name == kernel.end() || name->second.getKind() != llvm::msgpack::Type::String) continue;
        KernelInfo info;
        info.name = name->second.getString().str();
        info.registers = static_cast<std::uint32_t>(number(kernel, ".vgpr_count"));
        info.sgprs = static_cast<std::uint32_t>(number(kernel, ".sgpr_count"));
        info.shared_bytes = number(kernel, ".group_segment_fixed_size");
        info.local_bytes = number(kernel, ".private_segment_fixed_size");
        out.push_back(std::move(info));
      }
    }
    if (error) return internal("the code object's notes do not read: " + llvm::toString(std::move(error)));
  }
  return out;
}

}  // namespace kcache::server
