#include "amd_support.hpp"

#include <regex>
#include <sstream>

#include "test_support.hpp"

namespace kcache::test {

std::filesystem::path llvm_tools() { return KCACHE_LLVM_TOOLS_DIR; }

std::map<std::string, KernelNote> readobj_kernels(const std::string& notes) {
  std::map<std::string, KernelNote> out;
  std::string name;
  KernelNote note;
  std::istringstream in(notes);
  // Each kernel's map is one item of the amdhsa.kernels list ("  - "), its fields indented by
  // four; the fields of its arguments are indented further and never match.
  static const std::regex field(
      R"(^(  - |    )\.(name|vgpr_count|sgpr_count|group_segment_fixed_size|wavefront_size):\s+(\S+))");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with("  - ") || (!line.empty() && line[0] != ' ')) {
      if (!name.empty()) out[name] = note;
      name.clear();
      note = {};
    }
    std::smatch m;
    if (!std::regex_search(line, m, field)) continue;
    if (m[2] == "name") name = m[3];
    else if (m[2] == "vgpr_count") note.vgprs = std::stoull(m[3]);
    else if (m[2] == "sgpr_count") note.sgprs = std::stoull(m[3]);
    else if (m[2] == "wavefront_size") note.wave = std::stoi(m[3]);
    else note.lds_bytes = std::stoull(m[3]);
  }
  if (!name.empty()) out[name] = note;
  return out;
}

std::map<std::string, KernelNote> code_object_kernels(const std::filesystem::path& hsaco) {
  return readobj_kernels(run_program({(llvm_tools() / "llvm-readobj").string(), "--notes", hsaco.string()}).out);
}

}  // namespace kcache::test
