// Compiling in process in the unit tests: one Compiler for the machine's toolkit, and a
// shorthand for a device job.
#pragma once

#include <string>
#include <vector>

#include "compile/compiler.hpp"

namespace kcache::test {

// A Compiler for the toolkit at /usr/local/cuda (PTX only where it is absent).
inline const server::Compiler& default_compiler() {
  static const server::Compiler c(server::detect_toolchain("/usr/local/cuda"));
  return c;
}

// Compiles `module` as a device job for `images`.
inline Expected<server::CompileOutput> compile_device_job(const std::string& module, std::vector<ImageRequest> images,
                                                  CompileOptions options = {},
                                                  InputFormat format = InputFormat::llvm_text,
                                                  const server::Compiler& with = default_compiler()) {
  JobSpec spec;
  spec.format = format;
  spec.options = std::move(options);
  if (auto ok = canonicalize(spec, with.toolchain().host_triple); !ok) return ok.error();
  return with.compile(server::CompileJob{spec, {module}, std::move(images)});
}

}  // namespace kcache::test
