#include "launcher/options.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iterator>

namespace kcache::launcher {
namespace {

// Every option `nvcc --help` lists (CUDA 13.0), long spelling first. Options not listed here
// (a host compiler's, under -forward-unknown-to-host-compiler) are read as taking no value.
constexpr OptionSpec k_nvcc[] = {
    {"--cuda", "-cuda", Takes::none, k_other_mode},
    {"--cubin", "-cubin", Takes::none, k_other_mode},
    {"--fatbin", "-fatbin", Takes::none, k_other_mode},
    {"--ptx", "-ptx", Takes::none, k_other_mode},
    {"--optix-ir", "-optix-ir", Takes::none, k_other_mode},
    {"--ltoir", "-ltoir", Takes::none, k_other_mode},
    {"--preprocess", "-E", Takes::none, k_other_mode},
    {"--generate-dependencies", "-M", Takes::none, k_other_mode},
    {"--generate-nonsystem-dependencies", "-MM", Takes::none, k_other_mode},
    {"--generate-dependencies-with-compile", "-MD", Takes::none, k_dependency},
    {"--generate-nonsystem-dependencies-with-compile", "-MMD", Takes::none, k_dependency},
    {"--dependency-output", "-MF", Takes::separate_or_equals, k_dependency},
    {"--generate-dependency-targets", "-MP", Takes::none, k_dependency},
    {"--compile", "-c", Takes::none, k_compile_mode},
    {"--device-c", "-dc", Takes::none, k_compile_mode | k_device_link},
    {"--device-w", "-dw", Takes::none, k_compile_mode | k_device_link},
    {"--device-link", "-dlink", Takes::none, k_other_mode | k_device_link},
    {"--link", "-link", Takes::none, k_other_mode},
    {"--lib", "-lib", Takes::none, k_other_mode},
    {"--run", "-run", Takes::none, k_other_mode},
    {"--output-file", "-o", Takes::separate_or_equals, k_output},
    {"--pre-include", "-include", Takes::separate_or_equals, k_preprocessor},
    {"--objdir-as-tempdir", "-objtemp", Takes::none, k_other_mode},
    {"--library", "-l", Takes::joined_separate_or_equals, k_link},
    {"--define-macro", "-D", Takes::joined_separate_or_equals, k_preprocessor},
    {"--undefine-macro", "-U", Takes::joined_separate_or_equals, k_preprocessor},
    {"--include-path", "-I", Takes::joined_separate_or_equals, k_preprocessor},
    {"--system-include", "-isystem", Takes::separate_or_equals, k_preprocessor},
    {"--library-path", "-L", Takes::joined_separate_or_equals, k_link},
    {"--output-directory", "-odir", Takes::separate_or_equals, k_other_mode},
    {"--compiler-bindir", "-ccbin", Takes::separate_or_equals, k_host_compiler},
    {"--allow-unsupported-compiler", "-allow-unsupported-compiler", Takes::none, k_host_compiler},
    {"--archiver-binary", "-arbin", Takes::separate_or_equals, k_link},
    {"--cudart", "-cudart", Takes::separate_or_equals, k_link},
    {"--cudadevrt", "-cudadevrt", Takes::separate_or_equals, k_link},
    {"--libdevice-directory", "-ldir", Takes::separate_or_equals, k_compile},
    {"--target-directory", "-target-dir", Takes::separate_or_equals, k_compile},
    {"--use-local-env", "-use-local-env", Takes::none, k_other_mode},
    {"--force-cl-env-setup", "-force-cl-env-setup", Takes::none, k_other_mode},
    {"--profile", "-pg", Takes::none, k_debug_info},
    {"--debug", "-g", Takes::none, k_debug_info},
    {"--device-debug", "-G", Takes::none, k_debug_info},
    {"--generate-line-info", "-lineinfo", Takes::none, k_debug_info},
    {"--optimization-info", "-opt-info", Takes::separate_or_equals, k_compile},
    {"--optimize", "-O", Takes::joined_separate_or_equals, k_compile},
    {"--Ofast-compile", "-Ofc", Takes::separate_or_equals, k_compile},
    {"--dopt", "-dopt", Takes::separate_or_equals, k_compile},
    {"--dlink-time-opt", "-dlto", Takes::none, k_other_mode},
    {"--lto", "-lto", Takes::none, k_other_mode},
    {"--gen-opt-lto", "-gen-opt-lto", Takes::none, k_other_mode},
    {"--ftemplate-backtrace-limit", "-ftemplate-backtrace-limit", Takes::separate_or_equals, k_compile},
    {"--ftemplate-depth", "-ftemplate-depth", Takes::separate_or_equals, k_compile},
    {"--no-exceptions", "-noeh", Takes::none, k_compile},
    {"--shared", "-shared", Takes::none, k_other_mode},
    {"--x", "-x", Takes::separate_or_equals, k_language},
    {"--std", "-std", Takes::separate_or_equals, k_compile},
    {"--no-host-device-initializer-list", "-nohdinitlist", Takes::none, k_compile},
    {"--no-host-device-move-forward", "-nohdmoveforward", Takes::none, k_compile},
    {"--expt-relaxed-constexpr", "-expt-relaxed-constexpr", Takes::none, k_compile},
    {"--extended-lambda", "-extended-lambda", Takes::none, k_compile},
    {"--expt-extended-lambda", "-expt-extended-lambda", Takes::none, k_compile},
    {"--machine", "-m", Takes::separate_or_equals, k_compile},
    {"--m64", "-m64", Takes::none, k_compile},
    {"--compiler-options", "-Xcompiler", Takes::separate_or_equals, k_host_compiler},
    {"--linker-options", "-Xlinker", Takes::separate_or_equals, k_link},
    {"--archive-options", "-Xarchive", Takes::separate_or_equals, k_link},
    {"--ptxas-options", "-Xptxas", Takes::separate_or_equals, k_compile},
    {"--nvlink-options", "-Xnvlink", Takes::separate_or_equals, k_device_link},
    {"--static-global-template-stub", "-static-global-template-stub", Takes::separate_or_equals, k_compile},
    {"--device-entity-has-hidden-visibility", "-device-entity-has-hidden-visibility", Takes::separate_or_equals, k_compile},
    {"--forward-unknown-to-host-compiler", "-forward-unknown-to-host-compiler", Takes::none, k_host_compiler},
    {"--forward-unknown-to-host-linker", "-forward-unknown-to-host-linker", Takes::none, k_link},
    {"--forward-unknown-opts", "-forward-unknown-opts", Takes::none, k_host_compiler},
    {"--dont-use-profile", "-noprof", Takes::none, k_compile},
    {"--dryrun", "-dryrun", Takes::none, k_other_mode},
    {"--verbose", "-v", Takes::none, k_other_mode},
    {"--threads", "-t", Takes::separate_or_equals, k_compile},
    {"--split-compile", "-split-compile", Takes::separate_or_equals, k_compile},
    {"--split-compile-extended", "-split-compile-extended", Takes::separate_or_equals, k_compile},
    {"--fdevice-syntax-only", "-fdevice-syntax-only", Takes::none, k_other_mode},
    {"--fdevice-time-trace", "-fdevice-time-trace", Takes::separate_or_equals, k_other_mode},
    {"--keep", "-keep", Takes::none, k_other_mode},
    {"--keep-dir", "-keep-dir", Takes::separate_or_equals, k_other_mode},
    {"--save-temps", "-save-temps", Takes::none, k_other_mode},
    {"--clean-targets", "-clean", Takes::none, k_other_mode},
    {"--time", "-time", Takes::separate_or_equals, k_other_mode},
    {"--run-args", "-run-args", Takes::separate_or_equals, k_other_mode},
    {"--input-drive-prefix", "-idp", Takes::separate_or_equals, k_preprocessor},
    {"--dependency-drive-prefix", "-ddp", Takes::separate_or_equals, k_dependency},
    {"--drive-prefix", "-dp", Takes::separate_or_equals, k_preprocessor},
    {"--dependency-target-name", "-MT", Takes::separate_or_equals, k_dependency},
    {"--no-align-double", "", Takes::none, k_link},
    {"--no-device-link", "-nodlink", Takes::none, k_device_link},
    {"--gpu-architecture", "-arch", Takes::separate_or_equals, k_compile},
    {"--gpu-code", "-code", Takes::separate_or_equals, k_compile},
    {"--generate-code", "-gencode", Takes::separate_or_equals, k_compile},
    {"--relocatable-device-code", "-rdc", Takes::separate_or_equals, k_device_link},
    {"--entries", "-e", Takes::separate_or_equals, k_compile},
    {"--maxrregcount", "-maxrregcount", Takes::separate_or_equals, k_compile},
    {"--use_fast_math", "-use_fast_math", Takes::none, k_compile},
    {"--ftz", "-ftz", Takes::separate_or_equals, k_compile},
    {"--prec-div", "-prec-div", Takes::separate_or_equals, k_compile},
    {"--prec-sqrt", "-prec-sqrt", Takes::separate_or_equals, k_compile},
    {"--fmad", "-fmad", Takes::separate_or_equals, k_compile},
    {"--extra-device-vectorization", "-extra-device-vectorization", Takes::none, k_compile},
    {"--default-stream", "-default-stream", Takes::separate_or_equals, k_compile},
    {"--disable-warnings", "-w", Takes::none, k_compile},
    {"--keep-device-functions", "-keep-device-functions", Takes::none, k_compile},
    {"--source-in-ptx", "-src-in-ptx", Takes::none, k_debug_info},
    {"--restrict", "-restrict", Takes::none, k_compile},
    {"--Wreorder", "-Wreorder", Takes::none, k_compile},
    {"--Wdefault-stream-launch", "-Wdefault-stream-launch", Takes::none, k_compile},
    {"--Wmissing-launch-bounds", "-Wmissing-launch-bounds", Takes::none, k_compile},
    {"--Wext-lambda-captures-this", "-Wext-lambda-captures-this", Takes::none, k_compile},
    {"--Wno-deprecated-declarations", "-Wno-deprecated-declarations", Takes::none, k_compile},
    {"--Wno-deprecated-gpu-targets", "-Wno-deprecated-gpu-targets", Takes::none, k_compile},
    {"--Werror", "-Werror", Takes::separate_or_equals, k_compile},
    {"--resource-usage", "-res-usage", Takes::none, k_compile},
    {"--extensible-whole-program", "-ewp", Takes::none, k_device_link},
    {"--no-compress", "-no-compress", Takes::none, k_compile},
    {"--qpp-config", "-qpp-config", Takes::none, k_other_mode},
    {"--compile-as-tools-patch", "-astoolspatch", Takes::none, k_other_mode},
    {"--list-gpu-code", "-code-ls", Takes::none, k_other_mode},
    {"--list-gpu-arch", "-arch-ls", Takes::none, k_other_mode},
    {"--display-error-number", "-err-no", Takes::none, k_compile},
    {"--no-display-error-number", "-no-err-no", Takes::none, k_compile},
    {"--diag-error", "-diag-error", Takes::separate_or_equals, k_compile},
    {"--diag-suppress", "-diag-suppress", Takes::separate_or_equals, k_compile},
    {"--diag-warn", "-diag-warn", Takes::separate_or_equals, k_compile},
    {"--host-linker-script", "-hls", Takes::separate_or_equals, k_link},
    {"--augment-host-linker-script", "-aug-hls", Takes::none, k_link},
    {"--relocatable-link", "-r", Takes::none, k_other_mode},
    {"--brief-diagnostics", "-brief-diag", Takes::separate_or_equals, k_compile},
    {"--jump-table-density", "-jtd", Takes::separate_or_equals, k_compile},
    {"--relocatable-ptx", "-reloc-ptx", Takes::none, k_compile},
    {"--device-stack-protector", "-device-stack-protector", Takes::separate_or_equals, k_compile},
    {"--compress-mode", "-compress-mode", Takes::separate_or_equals, k_compile},
    {"--frandom-seed", "-frandom-seed", Takes::separate_or_equals, k_compile},
    {"--sanitize", "-sanitize", Takes::separate_or_equals, k_compile},
    {"--jobserver", "-jobserver", Takes::none, k_compile},
    {"--help", "-h", Takes::none, k_other_mode},
    {"--version", "-V", Takes::none, k_other_mode},
    {"--options-file", "-optf", Takes::separate_or_equals, k_options_file},
};

// The options a GCC-compatible driver (clang's as the CUDA compiler, and a host compiler as nvcc's
// plan runs it) reads alike: the mode, the output, the language, the dependency file, debug
// information, the preprocessor's and those passing a value on. Both tables below start with these.
constexpr OptionSpec k_gcc_driver[] = {
    {"-c", "", Takes::none, k_compile_mode},
    {"-o", "", Takes::joined_or_separate, k_output},
    {"-x", "", Takes::joined_or_separate, k_language},
    {"-E", "", Takes::none, k_other_mode},
    {"-g0", "", Takes::none, k_compile},
    {"-g", "", Takes::joined, k_debug_info},
    {"-MD", "", Takes::none, k_dependency},
    {"-MMD", "", Takes::none, k_dependency},
    {"-MP", "", Takes::none, k_dependency},
    {"-MF", "", Takes::joined_or_separate, k_dependency},
    {"-MT", "", Takes::joined_or_separate, k_dependency},
    {"-MQ", "", Takes::joined_or_separate, k_dependency},
    {"-I", "", Takes::joined_or_separate, k_preprocessor},
    {"-D", "", Takes::joined_or_separate, k_preprocessor},
    {"-U", "", Takes::joined_or_separate, k_preprocessor},
    {"-include", "", Takes::joined_or_separate, k_preprocessor},
    {"-imacros", "", Takes::joined_or_separate, k_preprocessor},
    {"-isystem", "", Takes::joined_or_separate, k_preprocessor},
    {"-iquote", "", Takes::joined_or_separate, k_preprocessor},
    {"-idirafter", "", Takes::joined_or_separate, k_preprocessor},
    {"-isysroot", "", Takes::joined_or_separate, k_preprocessor},
    {"-iprefix", "", Takes::joined_or_separate, k_preprocessor},
    {"-iwithprefix", "", Takes::joined_or_separate, k_preprocessor},
    {"-iwithprefixbefore", "", Takes::joined_or_separate, k_preprocessor},
    {"-Xpreprocessor", "", Takes::separate, k_preprocessor},
    {"-Xassembler", "", Takes::separate, k_compile},
    {"-Xlinker", "", Takes::separate, k_link},
};

// clang's driver as the CUDA compiler, beyond k_gcc_driver: the options that take a separate value (so that value is
// never read as a source) and those that decide the mode, the output, the dependency file or
// debug information. Others (-O2, -fPIC, -W...) are read as taking none, as they do.
constexpr OptionSpec k_clang[] = {
    {"-M", "", Takes::none, k_other_mode},
    {"-MM", "", Takes::none, k_other_mode},
    {"-S", "", Takes::none, k_other_mode},
    {"-emit-llvm", "", Takes::none, k_other_mode},
    {"-fsyntax-only", "", Takes::none, k_other_mode},
    {"--cuda-device-only", "", Takes::none, k_other_mode},
    {"--cuda-host-only", "", Takes::none, k_other_mode},
    {"--offload-device-only", "", Takes::none, k_other_mode},
    {"--offload-host-only", "", Takes::none, k_other_mode},
    {"--cuda-compile-host-device", "", Takes::none, k_other_mode},
    {"-###", "", Takes::none, k_other_mode},
    {"-v", "", Takes::none, k_other_mode},
    {"--version", "", Takes::none, k_other_mode},
    {"-flto", "", Takes::none, k_other_mode},
    {"-flto=", "", Takes::joined, k_other_mode},
    {"-fmodules", "", Takes::none, k_other_mode},
    {"--precompile", "", Takes::none, k_other_mode},
    {"-fembed-bitcode", "", Takes::none, k_other_mode},
    {"-save-temps", "", Takes::joined, k_other_mode},
    {"-print-", "", Takes::joined, k_other_mode},
    {"-fgpu-rdc", "", Takes::none, k_compile | k_device_link},
    {"-MJ", "", Takes::joined_or_separate, k_other_mode},
    {"-iwithsysroot", "", Takes::joined_or_separate, k_preprocessor},
    {"-isystem-after", "", Takes::joined_or_separate, k_preprocessor},
    {"-iframework", "", Takes::joined_or_separate, k_preprocessor},
    {"-iframeworkwithsysroot", "", Takes::joined_or_separate, k_preprocessor},
    {"-include-pch", "", Takes::separate, k_preprocessor},
    {"-Xclang", "", Takes::separate, k_compile},
    {"-Xarch_device", "", Takes::separate, k_compile},
    {"-Xarch_host", "", Takes::separate, k_compile},
    {"-Xcuda-ptxas", "", Takes::separate, k_compile},
    {"-Xcuda-fatbinary", "", Takes::separate, k_compile},
    {"-mllvm", "", Takes::separate, k_compile},
    {"-target", "", Takes::separate, k_compile},
    {"-arch", "", Takes::separate, k_compile},
    {"-Xoffload-linker", "", Takes::separate, k_link},
    {"--offload-link", "", Takes::none, k_link},
    {"-L", "", Takes::joined_or_separate, k_link},
    {"-l", "", Takes::joined_or_separate, k_link},
    {"-T", "", Takes::joined_or_separate, k_link},
    {"-z", "", Takes::separate, k_link},
    {"-F", "", Takes::joined_or_separate, k_preprocessor},
    {"-serialize-diagnostics", "", Takes::separate, k_other_mode},
    {"-working-directory", "", Takes::joined_or_separate, k_other_mode},
    {"-ivfsoverlay", "", Takes::joined_or_separate, k_other_mode},
};

// A host compiler driver as nvcc's plan runs it (gcc, g++ or clang++), beyond k_gcc_driver: the
// options whose work the preprocessed text holds, and those that take a separate value.
constexpr OptionSpec k_host[] = {
    {"-nostdinc", "", Takes::none, k_preprocessor},
    {"-nostdinc++", "", Takes::none, k_preprocessor},
    {"-Wp,", "", Takes::joined, k_preprocessor},
    {"-gno-record-gcc-switches", "", Takes::none, k_compile},
    {"-aux-info", "", Takes::separate, k_other_mode},
    {"-dumpbase", "", Takes::separate, k_compile},
    {"-dumpdir", "", Takes::separate, k_compile},
};

// clang -cc1's preprocessor options: the preprocessed text holds what they did, so the compile
// of that text, and its key, leave them out.
constexpr OptionSpec k_cc1[] = {
    {"-I", "", Takes::joined_or_separate, k_preprocessor},
    {"-D", "", Takes::joined_or_separate, k_preprocessor},
    {"-U", "", Takes::joined_or_separate, k_preprocessor},
    {"-internal-isystem", "", Takes::separate, k_preprocessor},
    {"-internal-externc-isystem", "", Takes::separate, k_preprocessor},
    {"-isystem", "", Takes::separate, k_preprocessor},
    {"-iquote", "", Takes::separate, k_preprocessor},
    {"-idirafter", "", Takes::separate, k_preprocessor},
    {"-include", "", Takes::separate, k_preprocessor},
    {"-resource-dir", "", Takes::separate, k_preprocessor},
    {"-fdebug-compilation-dir", "", Takes::separate, k_preprocessor},
    {"-fdebug-compilation-dir=", "", Takes::joined, k_preprocessor},
    {"-fcoverage-compilation-dir", "", Takes::separate, k_preprocessor},
    {"-fcoverage-compilation-dir=", "", Takes::joined, k_preprocessor},
    {"-dependency-file", "", Takes::separate, k_preprocessor | k_dependency},
    {"-MT", "", Takes::separate, k_preprocessor | k_dependency},
    {"-MQ", "", Takes::separate, k_preprocessor | k_dependency},
    {"-sys-header-deps", "", Takes::none, k_preprocessor | k_dependency},
    {"-MP", "", Takes::none, k_preprocessor | k_dependency},
    {"-o", "", Takes::separate, k_output},
    {"-x", "", Takes::separate, k_language},
};

std::vector<OptionSpec> joined_tables(std::span<const OptionSpec> shared, std::span<const OptionSpec> own) {
  std::vector<OptionSpec> out(shared.begin(), shared.end());
  out.insert(out.end(), own.begin(), own.end());
  return out;
}

bool takes_separately(Takes t) {
  return t == Takes::separate || t == Takes::joined_or_separate || t == Takes::separate_or_equals ||
         t == Takes::joined_separate_or_equals;
}
bool takes_joined(Takes t) {
  return t == Takes::joined || t == Takes::joined_or_separate || t == Takes::joined_separate_or_equals;
}
bool takes_equals(Takes t) { return t == Takes::separate_or_equals || t == Takes::joined_separate_or_equals; }

// The option spelled `word` (exactly, or with its value joined or after '='): the entry and
// the spelling matched; the longest joined spelling wins (-MF before -M).
struct Match {
  const OptionSpec* spec = nullptr;
  std::string_view spelling;
  bool exact = false;
  std::string_view joined_value;
};
Match find_option(const OptionTable& table, std::string_view word) {
  Match best;
  for (const OptionSpec& o : table.options) {
    for (std::string_view s : {o.name, o.alias}) {
      if (s.empty()) continue;
      if (word == s && (o.takes != Takes::joined || s.back() != '=')) return {&o, s, true, {}};
      if (!word.starts_with(s) || s.size() <= best.spelling.size()) continue;
      std::string_view rest = word.substr(s.size());
      if (takes_equals(o.takes) && rest.starts_with('=')) {
        best = {&o, s, false, rest.substr(1)};
      } else if (takes_joined(o.takes)) {
        best = {&o, s, false, rest};
      }
    }
  }
  return best;
}

std::string base_name(std::string_view path) {
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

// `name` without a version suffix (-12, -22.1): gcc-12 -> gcc.
std::string_view without_version(std::string_view name) {
  auto dash = name.rfind('-');
  if (dash == std::string_view::npos) return name;
  std::string_view version = name.substr(dash + 1);
  bool numeric = !version.empty() && std::all_of(version.begin(), version.end(), [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) || c == '.';
  });
  return numeric ? name.substr(0, dash) : name;
}

// The inputs of a command line as a table reads them.
std::vector<const Arg*> inputs_of(const std::vector<Arg>& args) {
  std::vector<const Arg*> out;
  for (const Arg& a : args) {
    if (a.is_input()) out.push_back(&a);
  }
  return out;
}

// The one rule for sources, shared by nvcc and clang: a mode the launcher does not cache, or no
// compile, runs unchanged; several sources each get a command of their own, writing the object
// the compiler would name; what the rule cannot split runs unchanged, with its reason.
Invocation one_rule(const OptionTable& table, const std::vector<std::string>& words, std::string_view suffix) {
  Invocation out;
  std::vector<Arg> args = read_args(table, words);
  bool compile = false;
  for (const Arg& a : args) {
    if (a.affects(k_other_mode)) {
      out.unchanged = "option " + a.spelling + std::string(suffix);
      return out;
    }
    compile |= a.affects(k_compile_mode);
  }
  if (!compile) {
    out.unchanged = suffix.empty() ? "not a compile (linking)" : "not a compile" + std::string(suffix);
    return out;
  }
  std::vector<const Arg*> inputs = inputs_of(args);
  if (inputs.empty()) {
    out.unchanged = "no source" + std::string(suffix);
    return out;
  }
  if (inputs.size() == 1) {
    out.per_source.push_back(words);
    return out;
  }
  for (const Arg& a : args) {
    if (a.affects(k_output)) {
      out.unchanged = "several sources with -o" + std::string(suffix);  // the compiler refuses it, and says so
      return out;
    }
    if (a.affects(k_dependency) && (a.spelling == "-MF" || a.spelling == "--dependency-output")) {
      out.unchanged = "several sources with one dependency file" + std::string(suffix);
      return out;
    }
    if (a.spelling == "-" || (a.is_input() && words[a.index] == "-")) {
      out.unchanged = "standard input" + std::string(suffix);
      return out;
    }
  }
  for (const Arg* source : inputs) {
    std::vector<std::string> one;
    for (const Arg& a : args) {
      if (a.is_input() && &a != source) continue;
      one.insert(one.end(), words.begin() + static_cast<std::ptrdiff_t>(a.index),
                 words.begin() + static_cast<std::ptrdiff_t>(a.index + a.count));
    }
    one.push_back("-o");
    one.push_back(std::filesystem::path(base_name(words[source->index])).replace_extension(".o").string());
    out.per_source.push_back(std::move(one));
  }
  return out;
}

}  // namespace

const OptionTable& nvcc_options() {
  static const OptionTable table{"nvcc", {std::begin(k_nvcc), std::end(k_nvcc)}};
  return table;
}
const OptionTable& clang_options() {
  static const OptionTable table{"clang", joined_tables(k_gcc_driver, k_clang)};
  return table;
}
const OptionTable& host_compiler_options() {
  static const OptionTable table{"host compiler", joined_tables(k_gcc_driver, k_host)};
  return table;
}
const OptionTable& cc1_options() {
  static const OptionTable table{"clang -cc1", {std::begin(k_cc1), std::end(k_cc1)}};
  return table;
}

std::vector<Arg> read_args(const OptionTable& table, std::span<const std::string> words) {
  std::vector<Arg> out;
  bool options = true;
  for (std::size_t i = 0; i < words.size(); ++i) {
    const std::string& w = words[i];
    Arg a;
    a.index = i;
    if (!options || w.size() < 2 || w[0] != '-') {
      out.push_back(std::move(a));
      continue;
    }
    if (w == "--") {
      options = false;
      a.unknown = true;
      a.spelling = w;
      out.push_back(std::move(a));
      continue;
    }
    Match m = find_option(table, w);
    if (m.spec == nullptr) {
      a.unknown = true;
      a.spelling = w.substr(0, w.find('='));
    } else {
      a.spec = m.spec;
      a.spelling = std::string(m.spelling);
      if (!m.exact) {
        a.value = std::string(m.joined_value);
      } else if (takes_separately(m.spec->takes) && i + 1 < words.size()) {
        a.value = words[++i];
        a.count = 2;
      }
    }
    out.push_back(std::move(a));
  }
  return out;
}

CompilerKind compiler_kind(std::string_view program) {
  std::string name = base_name(program);
  std::string_view plain = without_version(name);
  // A cross compiler's name: TRIPLE-gcc (aarch64-linux-gnu-g++); the triple has a dash of its own.
  auto dash = plain.rfind('-');
  std::string_view tool = plain;
  if (dash != std::string_view::npos && plain.substr(0, dash).find('-') != std::string_view::npos) {
    tool = plain.substr(dash + 1);
  }
  if (plain == "nvcc") return CompilerKind::nvcc;
  if (plain == "nvlink") return CompilerKind::nvlink;
  if (tool == "clang" || tool == "clang++") return CompilerKind::clang;
  if (tool == "gcc" || tool == "g++" || tool == "cc" || tool == "c++") return CompilerKind::gcc;
  return CompilerKind::none;
}

Invocation nvcc_invocation(const std::vector<std::string>& args) {
  // A device link (-dlink, with -shared as CMake writes it), and no other mode: one command line,
  // whose objects and archives nvlink links together.
  bool device_link = false, other = false, standard_input = false;
  std::size_t inputs = 0;
  for (const Arg& a : read_args(nvcc_options(), args)) {
    device_link |= a.spelling == "-dlink" || a.spelling == "--device-link";
    const bool link_mode = a.spelling == "-dlink" || a.spelling == "--device-link" || a.spelling == "-shared" ||
                           a.spelling == "--shared";
    other |= (a.affects(k_other_mode) && !link_mode) ||
             a.affects(k_compile_mode) || a.spelling == "-G" || a.spelling == "--device-debug";
    standard_input |= a.is_input() && args[a.index] == "-";
    inputs += a.is_input() ? 1 : 0;
  }
  if (device_link && !other && !standard_input && inputs > 0) return {{}, {args}, true};
  Invocation out = one_rule(nvcc_options(), args, "");
  if (!out.unchanged.empty()) return out;
  for (const Arg& a : read_args(nvcc_options(), args)) {
    // Device debug information names nvcc's own temporary files (ptxas -g writes its command
    // line into the cubin): no two runs of nvcc agree, and the launcher's cannot either.
    if (a.spelling == "-G" || a.spelling == "--device-debug") return {"option " + a.spelling, {}};
  }
  return out;
}

Invocation clang_invocation(const std::vector<std::string>& args) {
  Invocation out = one_rule(clang_options(), args, " (clang)");
  if (!out.unchanged.empty()) return out;
  for (const Arg& a : read_args(clang_options(), args)) {
    if (a.affects(k_debug_info)) return {"option -g (clang)", {}};  // its debug info names the work folder
  }
  return out;
}

bool is_cuda_compile(const std::vector<std::string>& args) {
  bool cuda = false;
  for (const Arg& a : read_args(clang_options(), args)) {
    if (a.affects(k_language)) cuda = a.value == "cuda";
    if (a.is_input() && args[a.index].ends_with(".cu")) cuda = true;
  }
  return cuda;
}

bool is_offload_link(const std::vector<std::string>& args) {
  bool offload_link = false;
  for (const Arg& a : read_args(clang_options(), args)) {
    if (a.affects(k_compile_mode) || a.affects(k_other_mode)) return false;
    if (a.is_input() && args[a.index].ends_with(".cu")) return false;
    offload_link |= a.spelling == "--offload-link";
  }
  return offload_link;
}

std::string object_path(const OptionTable& table, const std::vector<std::string>& words) {
  std::vector<Arg> args = read_args(table, words);
  for (const Arg& a : args) {
    if (a.affects(k_output)) return a.value;
  }
  for (const Arg& a : args) {
    if (a.is_input()) return std::filesystem::path(base_name(words[a.index])).replace_extension(".o").string();
  }
  return "a.o";
}

DependencyOptions dependency_options(const OptionTable& table, const std::vector<std::string>& words) {
  DependencyOptions out;
  for (const Arg& a : read_args(table, words)) {
    if (!a.affects(k_dependency)) continue;
    if (a.spelling == "-MP" || a.spelling == "--generate-dependency-targets") out.phony = true;
    if (a.spelling == "-MT" || a.spelling == "--dependency-target-name") out.target = a.value;
    if (a.spelling == "-MF" || a.spelling == "--dependency-output") out.file = a.value;
  }
  return out;
}

std::optional<std::string> first_with(const OptionTable& table, const std::vector<std::string>& words, unsigned effect) {
  for (const Arg& a : read_args(table, words)) {
    if (a.affects(effect)) return a.spelling;
  }
  return std::nullopt;
}

}  // namespace kcache::launcher
