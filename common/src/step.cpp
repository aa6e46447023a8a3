#include "kcache/step.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <set>
#include <span>

#include "kcache/process.hpp"

namespace kcache {
namespace {

constexpr std::array<StepTool, k_step_tool_count> k_tools = {
    StepTool::cicc, StepTool::clang, StepTool::ptxas, StepTool::nvlink, StepTool::host, StepTool::nvcc, StepTool::manifest};

// An option the tool takes, and what follows it.
enum class Operand {
  none,         // a flag alone
  value,        // the next argument is a value, never a file (a name for messages, a number)
  input_file,   // the next argument names a declared input
  output_file,  // the next argument names a declared output
};

// What an option's value may be (Operand::value), checked as the tool will read it.
enum class Value {
  text,          // printable text (a name written into the output, such as the source's path)
  number,        // decimal digits (limits, register counts)
  sm_arch,       // sm_XX (ptxas, clang's -target-cpu)
  compute_arch,  // compute_XX (cicc)
  device_triple, // nvptx64-nvidia-cuda, once
  host_triple,   // x86_64-pc-linux-gnu and its kind: lowercase words joined by '-'
  cpu_name,      // a host CPU (x86-64, znver4): lowercase letters, digits, '-', '_', '.'
  feature,       // a target feature: '+' or '-' and a lowercase word (+ptx88, +sm_80)
  file_name,     // a plain file name (no '/'): what clang writes into debug info as the main file
  reloc_model,   // -mrelocation-model's words
};

struct Option {
  std::string_view spelling;
  Operand operand = Operand::none;
  bool prefix = false;  // the spelling begins the argument (-O3, --gnu_version=120200)
  Value value = Value::text;
};

// cicc's options as nvcc 12 and 13 pass them (nvcc --dryrun with -std, -G, -lineinfo,
// --use_fast_math, -maxrregcount, --extended-lambda, --expt-relaxed-constexpr, -rdc,
// -diag-suppress). An option not here makes the step the launcher's to run.
constexpr Option k_cicc_options[] = {
    {"--static-host-stub"},         {"--device-hidden-visibility"}, {"--display_error_number"},
    {"--no_display_error_number"},  {"--allow_managed"},            {"--debug_mode"},
    {"--extended-lambda"},          {"--relaxed_constexpr"},        {"-m64"},
    {"--no-version-ident"},         {"-fast-math"},                 {"--gen_div_approx_ftz"},
    {"-g"},                         {"-generate-line-info"},        {"-tused"},
    {"--device-c"},                 {"--keep-device-functions"},    {"-w"},
    {"--c++", Operand::none, true}, {"--gnu_version=", Operand::none, true},
    {"-ftz=", Operand::none, true}, {"-prec_div=", Operand::none, true},
    {"-prec_sqrt=", Operand::none, true}, {"-fmad=", Operand::none, true},
    {"-O", Operand::none, true},    {"--diag_suppress=", Operand::none, true},
    {"--diag_error=", Operand::none, true}, {"--diag_warning=", Operand::none, true},
    {"--diag_remark=", Operand::none, true},
    {"--orig_src_file_name", Operand::value}, {"--orig_src_path_name", Operand::value},
    {"--include_file_name", Operand::value},  {"-arch", Operand::value, false, Value::compute_arch},
    {"-maxreg", Operand::value, false, Value::number},
    {"--module_id_file_name", Operand::input_file}, {"--gen_c_file_name", Operand::output_file},
    {"--stub_file_name", Operand::output_file},     {"--gen_device_file_name", Operand::output_file},
    {"-o", Operand::output_file},
};

// ptxas's options that change only its output (ptxas --help), as nvcc passes them.
constexpr Option k_ptxas_options[] = {
    {"-m64"},
    {"-v"},
    {"--verbose"},
    {"-g"},
    {"--device-debug"},
    {"--dont-merge-basicblocks"},
    {"--return-at-end"},
    {"--generate-line-info"},
    {"-lineinfo"},
    {"--compile-only"},
    {"-c"},
    {"--warn-on-spills"},
    {"--warn-on-local-memory-usage"},
    {"--warn-on-double-precision-use"},
    {"-Werror"},
    {"--extensible-whole-program"},
    {"-ewp"},
    {"--preserve-relocs"},
    {"--disable-optimizer-constants"},
    {"-suppress-stack-size-warning"},
    {"-arch=sm_", Operand::none, true},
    {"--gpu-name=sm_", Operand::none, true},
    {"-maxrregcount=", Operand::none, true},
    {"--maxrregcount=", Operand::none, true},
    {"-O", Operand::none, true},
    {"--opt-level=", Operand::none, true},
    {"--fmad=", Operand::none, true},
    {"--def-load-cache=", Operand::none, true},
    {"--def-store-cache=", Operand::none, true},
    {"--allow-expensive-optimizations=", Operand::none, true},
    {"-arch", Operand::value, false, Value::sm_arch},
    {"--gpu-name", Operand::value, false, Value::sm_arch},
    {"-maxrregcount", Operand::value, false, Value::number},
    {"-o", Operand::output_file},
    {"--output-file", Operand::output_file},
};

// nvlink's options in nvcc's device link (nvcc -dlink --dryrun, with -gencode lists and CMake's
// device link line). The objects and archives it links are inputs; its -L folders must be the
// daemon's own toolkit's (the daemon checks them: run_step), where -l finds libraries by a plain
// name (value_refusal) and libcudadevrt.a is the one whose digest is in nvlink's identity.
constexpr Option k_nvlink_options[] = {
    {"-m64"},
    {"--shared"},
    {"-report-arch"},
    {"--report-arch"},
    {"-l", Operand::none, true},
    {"-L", Operand::none, true},
    {"--arch=sm_", Operand::none, true},
    {"--arch=compute_", Operand::none, true},
    {"-arch=sm_", Operand::none, true},
    {"-cpu-arch=X86_64"},
    {"--cpu-arch=X86_64"},
    {"--register-link-binaries", Operand::output_file},
    {"--host-ccbin", Operand::value, false, Value::file_name},
    {"-o", Operand::output_file},
    {"--output-file", Operand::output_file},
};

// clang -cc1's options in the device compiles clang's driver plans for CUDA (clang++ -###, with
// -O*, -std, -ffast-math, -fgpu-rdc, -W..., --cuda-gpu-arch), less the preprocessor's (the step
// compiles preprocessed source): this side's own, then k_clang_cc1_options. Boolean -f flags are
// checked apart (clang_flag_allowed).
constexpr Option k_clang_options[] = {
    {"-S"},
    {"-emit-llvm-bc"},
    {"-no-integrated-as"},
    {"-fcuda-is-device"},
    {"-triple", Operand::value, false, Value::device_triple},
    {"-aux-triple", Operand::value, false, Value::host_triple},
    {"-target-cpu", Operand::value, false, Value::sm_arch},
    {"-aux-target-cpu", Operand::value, false, Value::cpu_name},
    {"-o", Operand::output_file},
};

// What clang -cc1 takes alike in both sides of a CUDA compile (searched after each side's own).
constexpr Option k_clang_cc1_options[] = {
    {"-cc1"},
    {"-disable-free"},
    {"-clear-ast-before-backend"},
    {"-disable-llvm-verifier"},
    {"-discard-value-names"},
    {"--offload-new-driver"},
    {"-vectorize-loops"},
    {"-vectorize-slp"},
    {"-mconstructor-aliases"},
    {"-menable-no-infs"},
    {"-menable-no-nans"},
    {"-mreassociate"},
    {"-w"},
    {"-pedantic"},
    {"-O", Operand::none, true},
    {"-std=", Operand::none, true},
    {"-W", Operand::none, true},
    {"-mframe-pointer=", Operand::none, true},
    {"-target-sdk-version=", Operand::none, true},
    {"-debugger-tuning=", Operand::none, true},
    {"-cuid=", Operand::none, true},
    {"-target-feature", Operand::value, false, Value::feature},
    {"-main-file-name", Operand::value, false, Value::file_name},
    {"-mrelocation-model", Operand::value, false, Value::reloc_model},
    {"-ferror-limit", Operand::value, false, Value::number},
    {"-ftemplate-backtrace-limit", Operand::value, false, Value::number},
    {"-fconstexpr-backtrace-limit", Operand::value, false, Value::number},
    {"-fmessage-length", Operand::value, false, Value::number},
};

// clang -cc1's options in the host side of a CUDA compile (clang++ -###, as above), which a
// daemon runs from the launcher's preprocessed text (check_host_run): the host triple once, the
// device triple as -aux-triple, a host CPU, and the device image the object embeds by the name of
// a declared input (this side's own, then k_clang_cc1_options). The daemon names the text and the
// object itself.
constexpr Option k_clang_host_options[] = {
    {"-emit-obj"},
    {"-pic-is-pie"},
    {"-triple", Operand::value, false, Value::host_triple},
    {"-aux-triple", Operand::value, false, Value::device_triple},
    {"-target-cpu", Operand::value, false, Value::cpu_name},
    {"-tune-cpu", Operand::value, false, Value::cpu_name},
    {"-pic-level", Operand::value, false, Value::number},
    {"-fcuda-include-gpubinary", Operand::input_file},
    {"-fembed-offload-object=", Operand::none, true},  // its name: a declared input (check_host_run)
};

// -f options that take a value after '=' (never a path: the check refuses a '/').
constexpr std::string_view k_clang_valued_flags[] = {
    "-fgnuc-version=", "-ffp-contract=", "-fdenormal-fp-math=", "-fdenormal-fp-math-f32=",
    "-ffp-exception-behavior=", "-fvisibility=", "-fcomplex-arithmetic=", "-ffp-eval-method=",
    "-fmessage-length=", "-fdiagnostics-format=", "-fconstexpr-steps=", "-fconstexpr-depth=",
    "-ftemplate-depth=", "-fbracket-depth=", "-fnew-alignment=", "-funwind-tables=",
};

// -f flags that read or write files beyond the step's own (plugins, module caches, profiles,
// crash reports, offload images) or that name paths in what they write.
constexpr std::string_view k_clang_refused_flag_words[] = {
    "plugin", "module", "profile", "coverage", "crash", "sanitize", "xray", "embed", "debug",
    "include", "gpubinary", "save", "record", "trace", "dump", "pch", "pgo", "trigraph",
};

// A -f flag clang may run with on the daemon: a boolean (-fexceptions, -fno-autolink) or a
// listed valued one, naming no path and nothing that reads or writes elsewhere.
bool clang_flag_allowed(std::string_view arg) {
  if (!arg.starts_with("-f") || arg.size() < 3 || arg.find('/') != std::string_view::npos) return false;
  for (std::string_view word : k_clang_refused_flag_words) {
    if (arg.find(word) != std::string_view::npos) return false;
  }
  auto eq = arg.find('=');
  if (eq == std::string_view::npos) {
    return std::all_of(arg.begin() + 2, arg.end(), [](char c) { return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-'; });
  }
  return std::any_of(std::begin(k_clang_valued_flags), std::end(k_clang_valued_flags),
                     [&](std::string_view f) { return arg.substr(0, eq + 1) == f; });
}

// -mllvm options a clang device compile may pass to LLVM: the driver's own, and NVPTX's.
bool clang_llvm_option_allowed(std::string_view arg) {
  if (arg.find('/') != std::string_view::npos || arg.find("file") != std::string_view::npos) return false;
  return arg == "-enable-memcpyopt-without-libcalls" || arg.starts_with("-nvptx-");
}

// A tool's option tables, searched in order (a side's own, then what both sides share).
using OptionTables = std::initializer_list<std::span<const Option>>;

const Option* find_option(OptionTables tables, std::string_view arg) {
  for (std::span<const Option> options : tables) {
    for (const Option& o : options) {
      if (o.prefix ? arg.starts_with(o.spelling) && arg.size() > o.spelling.size() : arg == o.spelling) return &o;
    }
  }
  return nullptr;
}

Error refused(const StepSpec& spec, std::string_view arg, std::string_view why) {
  return make_error(ErrorCode::k_invalid_argument, std::string(step_tool_name(spec.tool)) + " argument '" +
                                                       std::string(arg.substr(0, 200)) + "' " + std::string(why));
}

bool declared(const std::vector<std::string>& names, std::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// clang's options that take a value the generic table cannot check: its own answer, or nullopt
// when `arg` is not one of them. `i` moves past the value.
std::optional<Expected<void>> check_clang_special(const StepSpec& spec, std::size_t& i, OptionTables options) {
  const std::string& arg = spec.args[i];
  if (arg != "-mllvm" && arg != "-mlink-builtin-bitcode" && arg != "-x") {
    if (arg.starts_with("-f") && !find_option(options, arg)) {
      if (!clang_flag_allowed(arg)) return refused(spec, arg, "is not an option kcache runs on the daemon");
      return Expected<void>{};
    }
    return std::nullopt;
  }
  if (i + 1 == spec.args.size()) return refused(spec, arg, "lacks its value");
  const std::string& value = spec.args[++i];
  if (arg == "-mllvm" && !clang_llvm_option_allowed(value)) return refused(spec, value, "is not an LLVM option kcache passes");
  if (arg == "-mlink-builtin-bitcode" && value != k_step_libdevice) {
    return refused(spec, value, "is not libdevice: the only bitcode a clang step links is the daemon's libdevice.10.bc");
  }
  if (arg == "-x" && value != "cuda-cpp-output") return refused(spec, value, "is not preprocessed CUDA (cuda-cpp-output)");
  return Expected<void>{};
}

bool lower_word(std::string_view text, std::string_view also) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [&](char c) {
    return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) ||
           also.find(c) != std::string_view::npos;
  });
}

// Why `value` cannot be the value of an option of kind `kind`; empty when it can.
std::string value_refusal(Value kind, std::string_view value) {
  switch (kind) {
    case Value::text:
      return std::all_of(value.begin(), value.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x20 && c != 0x7f; })
                 ? ""
                 : "holds a control character";
    case Value::number:
      return !value.empty() && value.size() <= 9 && lower_word(value, "") &&
                     std::all_of(value.begin(), value.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })
                 ? ""
                 : "is not a number";
    case Value::sm_arch: return parse_sm_arch(value) ? "" : "is not an SM arch (sm_80)";
    case Value::compute_arch:
      return value.starts_with("compute_") && parse_sm_arch("sm_" + std::string(value.substr(8))) ? ""
                                                                                                   : "is not a virtual arch (compute_80)";
    case Value::device_triple: return value == "nvptx64-nvidia-cuda" ? "" : "is not the device triple nvptx64-nvidia-cuda";
    case Value::host_triple:
      return value.size() <= 64 && lower_word(value, "-_.") && value.find('-') != std::string_view::npos &&
                     std::islower(static_cast<unsigned char>(value.front()))
                 ? ""
                 : "is not a target triple";
    case Value::cpu_name: return value.size() <= 64 && lower_word(value, "-_.") ? "" : "is not a CPU name";
    case Value::feature:
      return value.size() >= 2 && value.size() <= 64 && (value.front() == '+' || value.front() == '-') &&
                     lower_word(value.substr(1), "-_.")
                 ? ""
                 : "is not a target feature (+ptx88)";
    case Value::file_name:
      return value.size() <= 255 && is_step_file_name(value.substr(0, std::min<std::size_t>(value.size(), 128))) ? ""
                                                                                                   : "is not a plain file name";
    case Value::reloc_model:
      for (std::string_view model : {"static", "pic", "ropi", "rwpi", "ropi-rwpi", "dynamic-no-pic"}) {
        if (value == model) return "";
      }
      return "is not a relocation model";
  }
  return "is not a value kcache knows";
}

Expected<void> check_args(const StepSpec& spec, OptionTables options) {
  bool has_input = false;
  std::size_t triples = 0, aux_triples = 0;
  const bool clang = spec.tool == StepTool::clang || (spec.tool == StepTool::host && !spec.args.empty() && spec.args[0] == "-cc1");
  for (std::size_t i = 0; i < spec.args.size(); ++i) {
    const std::string& arg = spec.args[i];
    if (arg.empty() || arg.front() != '-') {
      if (spec.tool == StepTool::host) return refused(spec, arg, "is not an option: the daemon names the input itself");
      if (!declared(spec.inputs, arg)) return refused(spec, arg, "is neither an option nor a declared input");
      has_input = true;
      continue;
    }
    if (clang) {
      if (auto special = check_clang_special(spec, i, options)) {
        if (!*special) return special->error();
        continue;
      }
    }
    const Option* option = find_option(options, arg);
    if (option == nullptr) return refused(spec, arg, "is not an option kcache runs on the daemon");
    // nvlink's libraries by a plain name: what -l names is looked for only in the -L folders.
    if (spec.tool == StepTool::nvlink && arg.starts_with("-l") && !lower_word(std::string_view(arg).substr(2), "_+-.")) {
      return refused(spec, arg, "names a library by more than a plain name");
    }
    if (option->operand == Operand::none) continue;
    if (i + 1 == spec.args.size()) return refused(spec, arg, "lacks its value");
    const std::string& operand = spec.args[++i];
    if (option->operand == Operand::value) {
      if (std::string why = value_refusal(option->value, operand); !why.empty()) {
        return refused(spec, operand, "(the value of " + std::string(arg) + ") " + why);
      }
      if ((arg == "-triple" && ++triples > 1) || (arg == "-aux-triple" && ++aux_triples > 1)) {
        return refused(spec, arg, "is given twice");
      }
    }
    if (option->operand == Operand::input_file && !declared(spec.inputs, operand)) {
      return refused(spec, operand, "is not a declared input");
    }
    if (option->operand == Operand::output_file && !declared(spec.outputs, operand)) {
      return refused(spec, operand, "is not a declared output");
    }
  }
  if (spec.tool == StepTool::host) return {};  // the daemon names the text itself
  if (!has_input) return make_error(ErrorCode::k_invalid_argument, std::string(step_tool_name(spec.tool)) + " step names no input");
  return {};
}

// Each field as in compile keys (hash_tagged_field).
enum Tag : std::uint8_t {
  k_tag_version = 1,
  k_tag_tool = 2,
  k_tag_tool_digest = 3,
  k_tag_arg = 4,
  k_tag_input = 5,
  k_tag_output = 6,
};

void hash_field(Sha256& h, Tag tag, std::string_view value) { hash_tagged_field(h, tag, value); }

// 2: offered objects need the publish role; every entry version 1's offers wrote is left behind.
constexpr std::uint32_t k_step_key_version = 2;

}  // namespace

std::string_view step_tool_name(StepTool tool) {
  switch (tool) {
    case StepTool::cicc: return "cicc";
    case StepTool::ptxas: return "ptxas";
    case StepTool::host: return "host";
    case StepTool::clang: return "clang";
    case StepTool::nvcc: return "nvcc";
    case StepTool::nvlink: return "nvlink";
    case StepTool::manifest: return "manifest";
  }
  return "?";
}

std::optional<StepTool> parse_step_tool(std::string_view name) {
  for (StepTool t : k_tools) {
    if (step_tool_name(t) == name) return t;
  }
  return std::nullopt;
}

std::span<const StepTool> all_step_tools() { return k_tools; }

Side step_side(StepTool tool) {
  return tool == StepTool::host || tool == StepTool::nvcc || tool == StepTool::manifest ? Side::host : Side::device;
}

bool is_step_file_name(std::string_view name) {
  if (name.empty() || name.size() > 128 || name.front() == '.' || name.front() == '-' || name.front() == '@') return false;
  if (name == k_step_libdevice) return false;
  return std::none_of(name.begin(), name.end(), [](char c) {
    return c == '/' || c == '\\' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
}

Expected<void> check_step(const StepSpec& spec) {
  if (!parse_step_tool(step_tool_name(spec.tool))) {
    return make_error(ErrorCode::k_invalid_argument, "unknown build step tool");
  }
  if (spec.args.size() > k_max_step_args) {
    return make_error(ErrorCode::k_invalid_argument, "a step has at most " + std::to_string(k_max_step_args) +
                                                         " arguments; this one has " + std::to_string(spec.args.size()));
  }
  for (const std::string& arg : spec.args) {
    if (arg.size() > k_max_step_arg_bytes) return refused(spec, arg, "is longer than 4096 bytes");
    if (arg.find('\0') != std::string::npos) return refused(spec, arg, "holds a NUL byte");
    // clang expands @FILE in every argument, option values included, before it even reads them.
    if (arg.starts_with('@')) return refused(spec, arg, "starts with '@', which a compiler reads as a response file");
  }
  if (spec.inputs.empty() || spec.inputs.size() > k_max_step_files || spec.outputs.size() > k_max_step_files) {
    return make_error(ErrorCode::k_invalid_argument, "a step has 1 to " + std::to_string(k_max_step_files) +
                                                         " inputs and at most as many outputs");
  }
  std::set<std::string_view> seen;
  for (const auto* names : {&spec.inputs, &spec.outputs}) {
    for (const std::string& name : *names) {
      if (!is_step_file_name(name) || name == k_step_stdout || name == k_step_stderr) {
        return make_error(ErrorCode::k_invalid_argument,
                          "'" + name.substr(0, 200) + "' cannot name a step's file: 1 to 128 bytes without '/', "
                                                      "'\\' or control characters, not starting with . or -");
      }
      if (!seen.insert(name).second) {
        return make_error(ErrorCode::k_invalid_argument, "the step names file '" + name + "' twice");
      }
    }
  }
  switch (spec.tool) {
    case StepTool::cicc: return check_args(spec, {k_cicc_options});
    case StepTool::ptxas: return check_args(spec, {k_ptxas_options});
    case StepTool::nvlink: return check_args(spec, {k_nvlink_options});
    case StepTool::clang: {
      // Only clang's CUDA device compile: it reads its input and libdevice, and writes its output.
      auto arg = [&](std::size_t i) { return i < spec.args.size() ? std::string_view(spec.args[i]) : std::string_view(); };
      bool nvptx = false, device = false;
      for (std::size_t i = 0; i + 1 < spec.args.size(); ++i) nvptx |= arg(i) == "-triple" && arg(i + 1) == "nvptx64-nvidia-cuda";
      for (const std::string& a : spec.args) device |= a == "-fcuda-is-device";
      if (arg(0) != "-cc1" || !nvptx || !device) {
        return make_error(ErrorCode::k_invalid_argument,
                          "a clang step is clang -cc1 -triple nvptx64-nvidia-cuda -fcuda-is-device on preprocessed CUDA");
      }
      return check_args(spec, {k_clang_options, k_clang_cc1_options});
    }
    case StepTool::manifest:
      if (spec.outputs != std::vector<std::string>{std::string(k_step_manifest)} || spec.inputs.size() != 1 || !spec.args.empty()) {
        return make_error(ErrorCode::k_invalid_argument, "a manifest step has one input, no arguments and one output, 'manifest'");
      }
      return {};
    case StepTool::host:
    case StepTool::nvcc:
      // Never run by the daemon: its arguments only name the compile in the key.
      if (spec.outputs != std::vector<std::string>{std::string(k_step_object)}) {
        return make_error(ErrorCode::k_invalid_argument,
                          std::string(step_tool_name(spec.tool)) + " steps have one output, 'object'");
      }
      return {};
  }
  return {};
}

std::vector<std::string> clang_identity_files(const std::string& clang) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path program = fs::canonical(clang, ec);
  if (ec) return {};
  std::vector<std::string> out = {program.string()};
  std::set<std::string> libraries;
  for (const auto& entry : fs::directory_iterator(program.parent_path().parent_path() / "lib", ec)) {
    std::string name = entry.path().filename().string();
    if (!name.starts_with("libclang-cpp.so.") && !name.starts_with("libLLVM.so.")) continue;
    fs::path real = fs::canonical(entry.path(), ec);
    if (!ec && fs::is_regular_file(real, ec)) libraries.insert(real.string());
  }
  out.insert(out.end(), libraries.begin(), libraries.end());
  return out;
}

namespace {

// Words of a pragma that make the compiler read or name a file (GCC dependency, clang module,
// include_alias, embed).
bool pragma_names_file(std::string_view text) {
  for (std::string_view word : {"dependency", "include", "module", "embed", "import"}) {
    if (text.find(word) != std::string_view::npos) return true;
  }
  return false;
}

// `text` (its lines spliced) as the preprocessor sees its lines: each comment a space (a block
// comment keeps its newlines, so lines keep their numbers), and each string, character and raw
// string literal emptied of its contents (newlines kept), so that nothing inside one reads as a
// directive and no quote hides a comment from this reading. A literal that meets the end of its
// line ends there, as an unterminated one does for the compilers.
std::string without_comments_and_literals(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  auto keep_newlines = [&](std::string_view skipped) {
    for (char c : skipped) {
      if (c == '\n') out += '\n';
    }
  };
  for (std::size_t i = 0; i < text.size();) {
    // A run of bytes that begin no comment, literal or raw string, kept as it is.
    std::size_t run = i;
    while (run < text.size() && text[run] != '/' && text[run] != 'R' && text[run] != '"' && text[run] != '\'') ++run;
    if (run > i) {
      out.append(text.substr(i, run - i));
      i = run;
      continue;
    }
    char c = text[i];
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '/') {
      i = std::min(text.find('\n', i), text.size());
      out += ' ';
      continue;
    }
    if (c == '/' && i + 1 < text.size() && text[i + 1] == '*') {
      std::size_t end = text.find("*/", i + 2);
      end = end == std::string_view::npos ? text.size() : end + 2;
      out += ' ';
      keep_newlines(text.substr(i, end - i));
      i = end;
      continue;
    }
    // A raw string: R"delim( ... )delim", with any encoding prefix before the R.
    bool raw = false;
    if (c == 'R' && i + 1 < text.size() && text[i + 1] == '"') {
      std::size_t word = i;  // where the identifier that ends in this R begins
      while (word > 0 && (std::isalnum(static_cast<unsigned char>(text[word - 1])) || text[word - 1] == '_')) --word;
      std::string_view prefix = text.substr(word, i - word);
      raw = prefix.empty() || prefix == "u8" || prefix == "u" || prefix == "U" || prefix == "L";
    }
    if (raw) {
      std::size_t open = text.find('(', i + 2);
      std::size_t line_end = text.find('\n', i);
      if (open != std::string_view::npos && (line_end == std::string_view::npos || open < line_end) && open - i - 2 <= 16) {
        std::string close = ")" + std::string(text.substr(i + 2, open - i - 2)) + "\"";
        std::size_t end = text.find(close, open + 1);
        end = end == std::string_view::npos ? text.size() : end + close.size();
        out += "\"\"";
        keep_newlines(text.substr(i, end - i));
        i = end;
        continue;
      }
    }
    if (c == '"' || c == '\'') {
      std::size_t j = i + 1;
      while (j < text.size() && text[j] != c && text[j] != '\n') j += text[j] == '\\' && j + 1 < text.size() ? 2 : 1;
      if (j < text.size() && text[j] == c) ++j;
      out += c;
      out += c;
      i = j;
      continue;
    }
    out += c;
    ++i;
  }
  return out;
}

Error unsafe_input(std::string_view name, std::size_t line, std::string_view why) {
  return make_error(ErrorCode::k_invalid_argument, "input '" + std::string(name.substr(0, 128)) + "', line " +
                                                       std::to_string(line) + ": " + std::string(why) +
                                                       "; a step's input is preprocessed text, which reads no file");
}

}  // namespace

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\f' || c == '\v'; }

// Calls visit(at, odd) for each directive's introducer in `text` (a '#', or the digraph "%:")
// that only blanks (and, with `odd_bytes`, non-ASCII bytes: `odd` says whether one is among them)
// precede on its line, in the text's order, until visit returns false. Found with memchr, then
// read backwards to the line's start: a text's lines are many, its introducers few.
template <typename Visit>
void for_each_introducer(std::string_view text, bool odd_bytes, Visit visit) {
  std::size_t hash = text.find('#'), digraph = text.find("%:");
  while (hash != std::string_view::npos || digraph != std::string_view::npos) {
    const bool is_hash = hash < digraph;
    const std::size_t at = is_hash ? hash : digraph;
    if (is_hash) {
      hash = text.find('#', at + 1);
    } else {
      digraph = text.find("%:", at + 1);
    }
    bool odd = false;
    std::size_t i = at;
    for (; i > 0 && text[i - 1] != '\n'; --i) {
      const char c = text[i - 1];
      if (is_blank(c) || c == '\r') continue;
      if (!odd_bytes || static_cast<unsigned char>(c) < 0x80) break;
      odd = true;
    }
    if (i > 0 && text[i - 1] != '\n') continue;  // something else comes first on its line
    if (!visit(at, odd)) return;
  }
}

// The number of the line `at` is on (from 1).
std::size_t line_of(std::string_view text, std::size_t at) {
  return 1 + static_cast<std::size_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
}


// The first check of check_step_input: NUL bytes, CRs that do not end a line, and non-ASCII bytes
// before a line's '#'. Text with neither a NUL nor a CR (what preprocessors write) needs only
// each line's first bytes read; other text is read byte by byte.
Expected<void> check_line_starts(std::string_view name, std::string_view bytes) {
  const bool plain = bytes.find('\0') == std::string_view::npos && bytes.find('\r') == std::string_view::npos;
  std::size_t line_number = 1;
  if (plain) {
    std::size_t odd_at = std::string_view::npos;
    for_each_introducer(bytes, true, [&](std::size_t at, bool odd) {
      if (odd) odd_at = at;
      return !odd;
    });
    if (odd_at != std::string_view::npos) return unsafe_input(name, line_of(bytes, odd_at), "a non-ASCII byte comes before its '#'");
    return {};
  }
  bool line_start = true;  // only blanks and non-ASCII bytes since the line began
  bool odd_start = false;  // and at least one non-ASCII byte among them
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c == '\0') return unsafe_input(name, line_number, "it holds a NUL byte");
    if (c == '\r' && (i + 1 == bytes.size() || bytes[i + 1] != '\n')) {
      return unsafe_input(name, line_number, "it holds a CR that does not end a line with LF");
    }
    if (c == '\n') {
      ++line_number;
      line_start = true;
      odd_start = false;
      continue;
    }
    if (!line_start) continue;
    if (c >= 0x80) {
      odd_start = true;
    } else if (c == '#' || (c == '%' && i + 1 < bytes.size() && bytes[i + 1] == ':')) {
      if (odd_start) return unsafe_input(name, line_number, "a non-ASCII byte comes before its '#'");
      line_start = false;
    } else if (!is_blank(static_cast<char>(c)) && c != '\r') {
      line_start = false;
    }
  }
  return {};
}

// `bytes` with its lines spliced (a backslash, optional blanks, a newline), as the compilers
// splice them; `bytes` itself (no copy, `storage` untouched) where nothing is spliced.
std::string_view spliced(std::string_view bytes, std::string& storage) {
  std::size_t copied = 0;  // bytes[0, copied) are in storage
  for (std::size_t i = bytes.find('\\'); i != std::string_view::npos; i = bytes.find('\\', i + 1)) {
    std::size_t j = bytes.find_first_not_of(" \t\f\v\r", i + 1);
    if (j == std::string_view::npos || bytes[j] != '\n') continue;
    if (storage.empty()) storage.reserve(bytes.size());
    storage.append(bytes.substr(copied, i - copied));
    copied = j + 1;
    i = j;
  }
  if (copied == 0) return bytes;
  storage.append(bytes.substr(copied));
  return storage;
}

}  // namespace

Expected<void> check_step_input(StepTool tool, std::string_view name, std::string_view bytes) {
  if (tool != StepTool::cicc && tool != StepTool::clang && tool != StepTool::host) return {};
  // Bytes on which the compilers disagree with this reading of lines: clang ends a line at a lone
  // CR (and splices at backslash-CR); both skip a NUL, and clang U+00A0 and U+3000, before '#'.
  // Preprocessors write none of them where they would matter, so they are refused outright.
  if (auto ok = check_line_starts(name, bytes); !ok) return ok;
  // Lines spliced first, as the compilers splice them.
  std::string storage;
  std::string_view text = spliced(bytes, storage);
  std::string uncommented;
  if (tool == StepTool::host) {
    // GCC's -fdirectives-only text keeps the unit's comments: read without them, as GCC reads it.
    uncommented = without_comments_and_literals(text);
    text = uncommented;
  } else if (text.find("/*") != std::string_view::npos) {
    return unsafe_input(name, 0, "it holds a block comment");
  }
  if (text.find("??=") != std::string_view::npos || text.find("??/") != std::string_view::npos) {
    return unsafe_input(name, 0, "it holds a trigraph");
  }
  // A _Pragma (or __pragma) operator whose line names a file: the first such line, by number.
  // Searched with Boyer-Moore-Horspool: a search from each '_' (in every other word of C++) would
  // read the text several times over.
  std::size_t pragma_line = SIZE_MAX;
  for (std::string_view op : {std::string_view("_Pragma"), std::string_view("__pragma")}) {
    const std::boyer_moore_horspool_searcher searcher(op.begin(), op.end());
    auto find_op = [&](std::size_t from) {
      auto at = std::search(text.begin() + static_cast<std::ptrdiff_t>(from), text.end(), searcher);
      return at == text.end() ? std::string_view::npos : static_cast<std::size_t>(at - text.begin());
    };
    for (std::size_t at = find_op(0); at != std::string_view::npos; at = find_op(at + 1)) {
      std::size_t begin = text.rfind('\n', at);
      begin = begin == std::string_view::npos ? 0 : begin + 1;
      std::size_t end = std::min(text.find('\n', at), text.size());
      if (!pragma_names_file(text.substr(begin, end - begin))) {
        at = end;
        continue;
      }
      pragma_line = std::min<std::size_t>(pragma_line, 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(begin), '\n'));
      break;
    }
  }
  // Each directive, the first that is not allowed: only line markers, #line, #pragma that names
  // no file (and, in GCC's -fdirectives-only text, #define and #undef) are.
  std::size_t refused_at = std::string_view::npos;
  std::string why;
  for_each_introducer(text, false, [&](std::size_t at, bool) {
    std::size_t end = std::min(text.find('\n', at), text.size());
    std::string_view rest = text.substr(at, end - at);
    rest.remove_prefix(rest.front() == '#' ? 1 : 2);
    std::size_t w = rest.find_first_not_of(" \t\f\v\r");
    if (w == std::string_view::npos) return true;  // the null directive
    rest = rest.substr(w);
    std::size_t word_end = 0;
    while (word_end < rest.size() && (std::isalnum(static_cast<unsigned char>(rest[word_end])) || rest[word_end] == '_')) {
      ++word_end;
    }
    std::string_view word = rest.substr(0, word_end);
    bool marker = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    if (marker || word == "line") return true;
    // GCC's -fdirectives-only text keeps the unit's macros, for its compile to expand.
    if (tool == StepTool::host && (word == "define" || word == "undef")) return true;
    if (word == "pragma") {
      if (!pragma_names_file(rest)) return true;
      why = "a #pragma names a file";
    } else {
      why = "it holds a #" + std::string(word.substr(0, 32)) + " directive";
    }
    refused_at = at;
    return false;
  });
  const std::size_t refused_line = refused_at == std::string_view::npos ? SIZE_MAX : line_of(text, refused_at);
  if (pragma_line != SIZE_MAX && pragma_line <= refused_line) return unsafe_input(name, pragma_line, "a _Pragma names a file");
  if (refused_line != SIZE_MAX) return unsafe_input(name, refused_line, why);
  return {};
}

namespace {

// The device images a clang host compile embeds: the names -fcuda-include-gpubinary and
// -fembed-offload-object= give.
std::vector<std::string_view> embedded_images(const StepSpec& spec) {
  std::vector<std::string_view> out;
  for (std::size_t i = 0; i < spec.args.size(); ++i) {
    std::string_view arg = spec.args[i];
    if (arg == "-fcuda-include-gpubinary" && i + 1 < spec.args.size()) out.push_back(spec.args[++i]);
    constexpr std::string_view k_embed = "-fembed-offload-object=";
    if (arg.starts_with(k_embed)) out.push_back(arg.substr(k_embed.size()));
  }
  return out;
}

// clang -cc1's host side of a CUDA compile: the text first, then only the images it embeds.
Expected<void> check_clang_host_run(const StepSpec& spec) {
  if (auto ok = check_args(spec, {k_clang_host_options, k_clang_cc1_options}); !ok) return ok;
  std::size_t triple = 0, aux = 0;
  bool emit_object = false;
  for (std::size_t i = 0; i + 1 < spec.args.size(); ++i) {
    if (spec.args[i] == "-triple") triple = i + 1;
    if (spec.args[i] == "-aux-triple") aux = i + 1;
  }
  for (const std::string& a : spec.args) emit_object |= a == "-emit-obj";
  if (triple == 0 || aux == 0 || !emit_object || spec.args[triple].starts_with("nvptx") ||
      spec.args[triple].starts_with("amdgcn")) {
    return make_error(ErrorCode::k_invalid_argument,
                      "a clang host step is clang -cc1 -triple HOST -aux-triple nvptx64-nvidia-cuda -emit-obj on "
                      "preprocessed CUDA");
  }
  std::vector<std::string_view> images = embedded_images(spec);
  for (std::string_view image : images) {
    if (!declared(spec.inputs, image)) return refused(spec, image, "is not a declared input");
    if (image == spec.inputs.front()) return refused(spec, image, "is the text the daemon compiles, not a device image");
  }
  for (std::size_t i = 1; i < spec.inputs.size(); ++i) {
    if (std::count(images.begin(), images.end(), spec.inputs[i]) != 1) {
      return refused(spec, spec.inputs[i], "is an input other than the text that no -fcuda-include-gpubinary names once");
    }
  }
  return {};
}

}  // namespace

bool is_embedded_step_input(const StepSpec& spec, std::string_view name) {
  if (spec.tool != StepTool::host || spec.args.empty() || spec.args.front() != "-cc1") return false;
  if (!spec.inputs.empty() && spec.inputs.front() == name) return false;
  std::vector<std::string_view> images = embedded_images(spec);
  return std::find(images.begin(), images.end(), name) != images.end();
}

Expected<void> check_host_run(const StepSpec& spec) {
  if (spec.tool != StepTool::host) return make_error(ErrorCode::k_invalid_argument, "only host steps run this way");
  if (!spec.args.empty() && spec.args.front() == "-cc1") return check_clang_host_run(spec);
  if (spec.inputs.size() != 1) {
    return make_error(ErrorCode::k_invalid_argument, "a host step the daemon runs has one input, the preprocessed text");
  }
  // Options that read or write files of their own, load code, or change what runs.
  constexpr std::string_view k_refused[] = {"-I", "-i", "-o", "-M", "-B", "-L", "-l", "-specs", "-wrapper", "-fplugin",
                                            "-save-temps", "-fdump", "-fprofile", "-fauto-profile", "-fdebug-prefix",
                                            "-ffile-prefix", "-fmacro-prefix", "-fcallgraph-info", "-fstack-usage",
                                            "-aux-info", "--sysroot", "-E", "-S", "-c", "-v", "-###", "-pipe",
                                            "--param=ggc", "-fcompare-debug", "-flto", "-frecord", "-Wa,", "-Wl,",
                                            "-Wp,", "-X", "-dump", "-print", "-no-canonical"};
  for (std::size_t i = 0; i < spec.args.size(); ++i) {
    const std::string& arg = spec.args[i];
    if (arg == "-x") {  // nvcc's host compile says -x c++: the input's language, and nothing else
      if (i + 1 == spec.args.size() || (spec.args[i + 1] != "c++" && spec.args[i + 1] != "c")) {
        return refused(spec, arg, "names a language other than c++ or c");
      }
      ++i;
      continue;
    }
    if (arg.empty() || arg.front() != '-') return refused(spec, arg, "is not an option: the daemon names the input itself");
    if (arg.find('/') != std::string::npos) return refused(spec, arg, "names a path");
    for (std::string_view prefix : k_refused) {
      if (arg.starts_with(prefix)) return refused(spec, arg, "is not an option a daemon runs a host compile with");
    }
  }
  return {};
}

Expected<Digest> host_compiler_identity(const std::string& driver, const std::string& proper,
                                        const std::function<Expected<Digest>(const std::string&)>& digest_of) {
  std::vector<Digest> files;
  auto d = digest_of(driver);
  if (!d) return d.error();
  files.push_back(*d);
  if (!proper.empty()) {
    auto named = run_process({driver, "-print-prog-name=" + proper});
    if (named && named->exit_code == 0) {
      std::string path = named->output.substr(0, named->output.find('\n'));
      if (auto p = digest_of(path)) files.push_back(*p);
    }
  }
  auto version = run_process({driver, "--version"});
  if (version) files.push_back(sha256(version->output));
  return step_tool_identity(StepTool::host, files);
}

Expected<Digest> clang_compiler_identity(const std::string& clang,
                                         const std::function<Expected<Digest>(const std::string&)>& digest_of) {
  std::vector<std::string> paths = clang_identity_files(clang);
  if (paths.empty()) return make_error(ErrorCode::k_not_found, "cannot find " + clang);
  std::vector<Digest> files;
  for (const std::string& p : paths) {
    auto d = digest_of(p);
    if (!d) return d.error();
    files.push_back(*d);
  }
  return step_tool_identity(StepTool::host, files);
}

Digest step_tool_identity(StepTool tool, std::span<const Digest> files) {
  Sha256 h;
  h.update("kcache-step-tool");
  h.update(step_tool_name(tool));
  for (const Digest& d : files) h.update(as_bytes(d));
  return h.finish();
}

Key compute_step_key(const StepSpec& spec, std::span<const Digest> input_digests) {
  Sha256 h;
  h.update("kcache-step");
  std::array<char, 4> version{};
  for (int i = 0; i < 4; ++i) version[i] = static_cast<char>((k_step_key_version >> (8 * i)) & 0xff);
  hash_field(h, k_tag_version, {version.data(), version.size()});
  char tool = static_cast<char>(spec.tool);
  hash_field(h, k_tag_tool, {&tool, 1});
  hash_field(h, k_tag_tool_digest, as_bytes(spec.tool_digest));
  for (const std::string& arg : spec.args) hash_field(h, k_tag_arg, arg);
  for (std::size_t i = 0; i < spec.inputs.size(); ++i) {
    std::string value = spec.inputs[i];
    value += '\0';
    if (i < input_digests.size()) value += as_bytes(input_digests[i]);
    hash_field(h, k_tag_input, value);
  }
  for (const std::string& name : spec.outputs) hash_field(h, k_tag_output, name);
  return Key{h.finish()};
}

bool image_belongs_to(Side side, ImageKind kind, std::string_view arch) {
  if (side == Side::host && kind == ImageKind::file) {
    return arch == k_step_stdout || arch == k_step_stderr || arch == k_step_manifest;
  }
  return kind_side(kind) == side;
}

Expected<Digest> device_tool_identity(StepTool tool, const std::string& program, const std::string& libdevice,
                                      const std::function<Expected<Digest>(const std::string&)>& digest_of) {
  std::vector<std::string> paths = {program};
  if (tool == StepTool::clang) paths = clang_identity_files(program);
  if (paths.empty() || paths.front().empty()) return make_error(ErrorCode::k_not_found, "cannot find " + program);
  if (tool == StepTool::cicc || tool == StepTool::clang || tool == StepTool::nvlink) paths.push_back(libdevice);
  std::vector<Digest> files;
  for (const std::string& p : paths) {
    auto digest = digest_of(p);
    if (!digest) return digest.error();
    files.push_back(*digest);
  }
  return step_tool_identity(tool, files);
}

}  // namespace kcache
