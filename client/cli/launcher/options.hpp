// What the launcher knows of each compiler's options, in one table per compiler (in the spirit of
// ccache's compopt.cpp and sccache's argument tables): each option's spellings, how it takes its
// value, and what it affects. The mode check, the sources, the output path, the dependency flags
// and the host key all read these tables; nothing else in the launcher lists options.
//
// Toolkit-free (no process is run), so the planners that read them have unit tests of their own
// (tests/unit/launcher_plan_test.cpp).
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kcache::launcher {

// How an option takes its value.
enum class Takes : unsigned char {
  none,                       // -c
  separate,                   // -Xclang V
  joined,                     // -O2, --cuda-path=V (the name spelled with its '='), -g*: a prefix
  joined_or_separate,         // -I V, -IV (clang, gcc)
  separate_or_equals,         // -arch V, -arch=V, --gpu-architecture=V (nvcc)
  joined_separate_or_equals,  // nvcc's -I, -D, -U, -L, -l, -O: -IV, -I V, -I=V
};

// What an option affects (a set of these bits).
enum Effect : unsigned {
  k_compile = 1u << 0,        // what is compiled (-arch, -O2, -std): part of the steps' keys
  k_compile_mode = 1u << 1,   // a mode the launcher caches: compile to an object (-c, -dc)
  k_other_mode = 1u << 2,     // anything else (-E, -ptx, a link, --version): the compiler runs unchanged
  k_output = 1u << 3,         // names the output (-o)
  k_dependency = 1u << 4,     // the dependency file (-MD, -MF, -MT, -MP)
  k_preprocessor = 1u << 5,   // the preprocessed text holds what it did (-I, -D, -include)
  k_host_compiler = 1u << 6,  // which host compiler runs, or its options (-ccbin, -Xcompiler)
  k_device_link = 1u << 7,    // relocatable device code (-rdc, -dc, -fgpu-rdc)
  k_debug_info = 1u << 8,     // debug information, which names paths (-g, -G, -lineinfo)
  k_options_file = 1u << 9,   // more words, read from a file (--options-file)
  k_language = 1u << 10,      // the inputs' language (-x)
  k_link = 1u << 11,          // only a link reads it (-l, -L, -Xlinker)
};

struct OptionSpec {
  std::string_view name;   // its spelling (nvcc: the long one, --output-file)
  std::string_view alias;  // another spelling (nvcc: the short one, -o); empty when none
  Takes takes = Takes::none;
  unsigned effects = k_compile;
};

struct OptionTable {
  std::string_view compiler;
  std::vector<OptionSpec> options;
};

// The tables: nvcc's driver (every option of `nvcc --help`), clang's driver as the CUDA compiler,
// a host compiler driver (gcc, g++, clang++) as nvcc's plan runs it, and clang -cc1's
// preprocessor options (the options the launcher's split of a cc1 line leaves to the preprocessor).
const OptionTable& nvcc_options();
const OptionTable& clang_options();
const OptionTable& host_compiler_options();
const OptionTable& cc1_options();

// One word or option of a command line, as a table reads it.
struct Arg {
  const OptionSpec* spec = nullptr;  // the option; nullptr for an input or an option the table lacks
  std::size_t index = 0;             // its first word in the command line
  std::size_t count = 1;             // the words it spans (2: a value in the next word)
  std::string spelling;              // the option as written, without its value (-arch, -I)
  std::string value;                 // its value, where it takes one
  bool unknown = false;              // an option the table does not know (taken to have no value)

  bool is_input() const { return spec == nullptr && !unknown; }
  bool affects(unsigned effect) const { return spec != nullptr && (spec->effects & effect) != 0; }
};

// The command line's words read with `table`. A lone "-" is an input (standard input); a word
// after "--" too. An option whose separate value is missing spans its one word (value empty).
std::vector<Arg> read_args(const OptionTable& table, std::span<const std::string> args);

// The compilers the launcher recognises, by a program's name or path: versioned names (gcc-12,
// clang++-22), full paths, cross compilers (aarch64-linux-gnu-g++, x86_64-linux-gnu-gcc-12).
enum class CompilerKind { none, nvcc, clang, gcc, nvlink };
CompilerKind compiler_kind(std::string_view program);
// Whether a program of a compiler's plan is a host C or C++ compiler driver.
inline bool is_host_compiler(std::string_view program) {
  CompilerKind k = compiler_kind(program);
  return k == CompilerKind::gcc || k == CompilerKind::clang;
}

// The launcher's one rule for a command line (its options files already read): the compiler runs
// unchanged, for `unchanged` (counted by that reason), or each source gets its own compile, with
// its own object: `per_source` holds one command line per source (the compiler's arguments), the
// line itself where it has one source.
struct Invocation {
  std::string unchanged;
  std::vector<std::vector<std::string>> per_source;
  bool device_link = false;  // nvcc -dlink: its one command line links every input together
};
Invocation nvcc_invocation(const std::vector<std::string>& args);
Invocation clang_invocation(const std::vector<std::string>& args);
// Whether clang's arguments compile CUDA (-x cuda, or a .cu source): else clang is not kcache's.
bool is_cuda_compile(const std::vector<std::string>& args);
// Whether they link a program with its device code (--offload-link), compiling nothing.
bool is_offload_link(const std::vector<std::string>& args);

// The object a compile writes: its -o, else the source's name, without its folder, with .o for its
// extension (as nvcc and clang name it).
std::string object_path(const OptionTable& table, const std::vector<std::string>& args);

// The dependency file's options of a compile.
struct DependencyOptions {
  bool phony = false;  // -MP: a rule of its own for each header
  std::string target;  // -MT: the rule's target; empty: the object
  std::string file;    // -MF
};
DependencyOptions dependency_options(const OptionTable& table, const std::vector<std::string>& args);

// The first option of `args` with `effect`, as written; nullopt when none.
std::optional<std::string> first_with(const OptionTable& table, const std::vector<std::string>& args, unsigned effect);

}  // namespace kcache::launcher
