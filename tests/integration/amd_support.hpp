// What the AMD tests share (amd_test.cpp, hip_parity_test.cpp): LLVM's tools and their reading
// of an HSA code object.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

namespace kcache::test {

// LLVM 22's bin folder (llvm-readobj, llvm-link, opt, llc, ld.lld).
std::filesystem::path llvm_tools();

// One kernel of a code object as its metadata note describes it.
struct KernelNote {
  std::uint64_t vgprs = 0;      // .vgpr_count
  std::uint64_t sgprs = 0;      // .sgpr_count
  std::uint64_t lds_bytes = 0;  // .group_segment_fixed_size
  int wave = 0;                 // .wavefront_size
  bool operator==(const KernelNote&) const = default;
};

// (kernel name) -> its note, from llvm-readobj --notes output: LLVM's own reading of the code
// object's metadata.
std::map<std::string, KernelNote> readobj_kernels(const std::string& notes);

// readobj_kernels of the code object at `hsaco`.
std::map<std::string, KernelNote> code_object_kernels(const std::filesystem::path& hsaco);

}  // namespace kcache::test
