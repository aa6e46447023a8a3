// The LLVM steps both pipelines share: parsing and verifying a module, target machines,
// optimisation with the new pass manager, code emission, debug-info and fast-math options.
#pragma once

#include <llvm/IR/CallingConv.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm/IR/Module.h>
#include <llvm/Support/CodeGen.h>
#include <llvm/Target/TargetMachine.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/expected.hpp"
#include "kcache/job.hpp"

namespace kcache::server {

inline Error invalid(std::string message) { return make_error(ErrorCode::k_invalid_argument, std::move(message)); }

std::string join(const std::vector<std::string>& items, std::string_view separator);
// The first items, comma-separated, within about `budget` bytes, then "and N more": for messages
// that must stay short (a gRPC status message) however many items there are.
std::string join_capped(const std::vector<std::string>& items, std::size_t budget);

// Collects what LLVM reports while a job runs; errors fail the job, warnings become diagnostics.
// Install with install(ctx) before parsing.
struct Diagnostics {
  std::vector<std::string> errors;
  std::vector<std::string> warnings;
  void install(llvm::LLVMContext& ctx);
};

// Names everything that refers to `gv` ("function 'f'", "global 'table'", "alias 'a'",
// "llvm.used", ...), looking through constant expressions and aggregates; sorted, unique.
std::vector<std::string> users_of(const llvm::GlobalValue& gv);

// A job's module in its own LLVMContext, with what LLVM reports collected.
struct LoadedModule {
  llvm::LLVMContext ctx;  // declared first: destroyed after the module
  Diagnostics diags;
  std::unique_ptr<llvm::Module> module;
};

// Parses bitcode or text IR (errors name line and column) and runs the verifier.
Expected<std::unique_ptr<LoadedModule>> load_module(InputFormat format, std::string_view bytes);

// One IR module of a job: its format, bytes, and how errors name it ("the module", "linked module 2").
struct ModuleSource {
  InputFormat format;
  std::string_view bytes;
  std::string name;
};
// Parses and verifies each module, then links them all into the first (relocatable device code:
// a symbol one declares, another defines). Two definitions of one symbol are INVALID_ARGUMENT.
Expected<std::unique_ptr<LoadedModule>> load_and_link(const std::vector<ModuleSource>& modules);

// "used by function 'k', global 't'", or "unused".
std::string users_text(const llvm::GlobalValue& gv);

// Makes each of `names` (the job's entry points) a kernel: defined in `m` (the error lists the
// functions that are), returning void, given `kernel_cc` (PTX_Kernel, AMDGPU_KERNEL) and external
// linkage.
Expected<void> mark_entry_points(llvm::Module& m, const std::vector<std::string>& names, llvm::CallingConv::ID kernel_cc);

// Checks every reference to a runtime function (gpu_*) against rtlib's manifest, before linking:
// the declaration, what rtlib expects, and who made the call. Returns whether rtlib is needed (a
// runtime function, or a C++ ABI function rtlib defines, such as __cxa_pure_virtual from a vtable).
Expected<bool> check_runtime_references(const llvm::Module& m);

// Links `bitcode` (rtlib, libdevice, ROCm's device libraries) into `m`, taking only the
// definitions `m` uses.
Expected<void> link_needed(llvm::Module& m, std::string_view bitcode, const std::string& what, Diagnostics& diags);

// Clang tags every function with the arch it was compiled for (target-cpu, target-features); the
// job's arch wins, so one module compiles for every arch it names.
void retarget_functions(llvm::Module& m);

// Keeps full debug info, line tables only, or none, as the options say.
void apply_debug_options(llvm::Module& m, const CompileOptions& options);

// Fast math: every floating-point operation may be reassociated and approximated, and f32
// denormals flush to zero.
void apply_fast_math(llvm::Module& m);

Expected<std::unique_ptr<llvm::TargetMachine>> make_target_machine(const llvm::Triple& triple, const std::string& cpu,
                                                                  const std::string& features,
                                                                  std::optional<llvm::Reloc::Model> reloc,
                                                                  std::uint32_t opt_level);

// Runs the default optimisation pipeline for `opt_level`, with the target's own passes.
void optimize(llvm::Module& m, llvm::TargetMachine& tm, std::uint32_t opt_level);

// Emits assembly or an object; fails if LLVM reported an error while doing so.
Expected<std::string> emit(llvm::Module& m, llvm::TargetMachine& tm, llvm::CodeGenFileType type,
                           const Diagnostics& diags, const std::string& what);

// A scratch folder removed when the job ends.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return m_path; }

 private:
  std::filesystem::path m_path;
};

}  // namespace kcache::server
