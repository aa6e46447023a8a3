// A device module that takes LLVM a noticeable while to compile (about 6 ms a kernel here):
// chains of dependent loads, multiplies and stores the optimiser cannot fold away. Header-only,
// so the tests and bench/ generate the very same modules.
#pragma once

#include <string>

namespace kcache::test {

inline std::string slow_device_module(int kernels) {
  std::string ir = "target triple = \"nvptx64-nvidia-cuda\"\n";
  for (int k = 0; k < kernels; ++k) {
    ir += "define ptx_kernel void @k" + std::to_string(k) + "(ptr addrspace(1) %p, float %a) {\n";
    std::string prev = "%a";
    for (int j = 0; j < 30; ++j) {
      std::string n = std::to_string(j);
      ir += "  %q" + n + " = getelementptr float, ptr addrspace(1) %p, i64 " + n + "\n";
      ir += "  %v" + n + " = load float, ptr addrspace(1) %q" + n + "\n";
      ir += "  %m" + n + " = fmul float %v" + n + ", " + prev + "\n";
      ir += "  store float %m" + n + ", ptr addrspace(1) %q" + n + "\n";
      prev = "%m" + n;
    }
    ir += "  ret void\n}\n";
  }
  return ir;
}

}  // namespace kcache::test
