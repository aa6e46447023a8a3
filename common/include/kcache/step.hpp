// Build steps: one program of a CUDA compiler's plan (nvcc --dryrun), run on files in a folder of
// its own. The compiler launcher (client/cli/launcher/) sends the device steps, cicc and ptxas, to
// the daemon, which runs them in its workers, and keeps the host compile's object as a host entry.
// A step is named by what it runs (the tool and its identity), its arguments and its input bytes;
// its files are plain names in the step's folder, never paths. The key encoding is in
// common/KEY_FORMAT.md ("Build steps"), apart from the compile keys'.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/expected.hpp"
#include "kcache/job.hpp"
#include "kcache/key.hpp"
#include "kcache/sha256.hpp"

namespace kcache {

// cicc: preprocessed CUDA C++ (.cpp1.ii) to PTX and the host stub; ptxas: PTX to a cubin; host:
// the host compiler's object of the translation unit (never run by the daemon: the client
// compiles it and offers the object, which the host wall checks before it is stored); clang:
// clang's device compile (`clang -cc1 -fcuda-is-device`) of preprocessed CUDA C++ to PTX; nvcc:
// nvcc's whole compile of a translation unit past its preprocessors (cudafe++, each arch's cicc
// and ptxas, fatbinary and the host compile), named by the preprocessed texts and the plan, whose
// object a warm launch takes without running any of them (like host, never run by the daemon).
enum class StepTool : std::uint8_t { cicc = 1, ptxas = 2, host = 3, clang = 4, nvcc = 5, nvlink = 6, manifest = 7 };

std::string_view step_tool_name(StepTool tool);  // "cicc", "ptxas", "host", "clang", "nvcc", "nvlink", "manifest"
std::optional<StepTool> parse_step_tool(std::string_view name);
// cicc, clang, ptxas, nvlink, host, nvcc, manifest: the order stats list them
std::span<const StepTool> all_step_tools();
inline constexpr std::size_t k_step_tool_count = 7;
// A direct-mode manifest (the launcher's direct.hpp) kept by the daemon: a host-side entry under a
// key of the manifest's own key, holding one file, `manifest`. Written only by a publish client
// (it points builds at objects), never run.
inline constexpr std::string_view k_step_manifest = "manifest";
// The device-link library nvlink links for `-lcudadevrt` (the daemon's own toolkit's, by its
// digest in nvlink's identity), in the toolkit's library folder.
inline constexpr std::string_view k_step_cudadevrt = "libcudadevrt.a";
// A CUDA toolkit's library folders, relative to its root, in the order libcudadevrt.a is looked
// for: the launcher (clang's nvlink identity) and the daemon (its nvlink and the -L folders it
// takes) read the same list.
inline constexpr std::string_view k_toolkit_library_folders[] = {"lib64", "targets/x86_64-linux/lib",
                                                                 "targets/sbsa-linux/lib", "lib"};
// The cache a step's entry lives in: device for cicc, clang and ptxas, host for the host compile
// and nvcc's whole compile (objects, behind the host wall).
Side step_side(StepTool tool);

// The name a clang step gives CUDA's libdevice (`-mlink-builtin-bitcode libdevice.10.bc`): the
// daemon puts its own toolkit's there, whose digest is part of the clang tool's identity.
inline constexpr std::string_view k_step_libdevice = "libdevice.10.bc";

// The files a clang program is made of, for its identity: the program itself and the LLVM and
// clang libraries beside it (../lib/libclang-cpp.so.* and libLLVM.so.*), real paths, in order.
// Empty when `clang` cannot be found.
std::vector<std::string> clang_identity_files(const std::string& clang);

// The output of a host or nvcc step that is its object; the others (stdout, stderr) are text.
inline constexpr std::string_view k_step_object = "object";
// What a step printed, kept with its files so a hit prints it again (the compiler's warnings).
inline constexpr std::string_view k_step_stdout = "stdout";
inline constexpr std::string_view k_step_stderr = "stderr";

// Whether an image of `kind` named `arch` may be kept on `side`: device kinds on the device
// side, objects on the host side, and beside a host step's object the text its compile printed
// (file images named stdout and stderr: printed again on a hit, never linked or loaded). The one
// rule the store, its check and the fleet's reader all apply.
bool image_belongs_to(Side side, ImageKind kind, std::string_view arch);

struct StepSpec {
  StepTool tool = StepTool::cicc;
  // The tool's identity: SHA-256 over its program and what it reads besides its inputs (cicc:
  // its program and libdevice; clang: clang_identity_files and libdevice; ptxas: its program;
  // host: the host compiler's programs and version), as the launcher computes it. The daemon runs a
  // device step only with a tool of this identity.
  Digest tool_digest{};
  std::vector<std::string> args;     // as run in the step's folder: files by their names
  std::vector<std::string> inputs;   // the input files' names, in order
  std::vector<std::string> outputs;  // the files it writes that come back, in order
};

// Limits of one step.
inline constexpr std::size_t k_max_step_args = 512;
inline constexpr std::size_t k_max_step_arg_bytes = 4096;
inline constexpr std::size_t k_max_step_files = 16;  // inputs, and outputs, each

// Whether `name` may name a step's file: 1 to 128 bytes, no '/', '\\' or control character, not
// starting with '.', '-' or '@' (so it is never a path, an option, a response file or a hidden
// file), and not the libdevice name a clang step is given. Spaces and quotes
// are fine: steps run without a shell.
bool is_step_file_name(std::string_view name);

// Checks a step before anything runs: counts and sizes, file names (valid, each once across
// inputs and outputs; stdout and stderr are not files), and for cicc and ptxas every argument
// against the tool's allow-list: options known to change only the output, file operands only
// by a declared name. INVALID_ARGUMENT naming the first offending argument otherwise (the
// launcher runs such a step itself).
Expected<void> check_step(const StepSpec& spec);

// Checks an input's bytes before a step runs on them: cicc, clang and the host compiler read theirs
// as preprocessed C++, yet all still obey #include, #embed and the like in it, which would read any file of the
// daemon's host (into diagnostics or the output). Such text, as a preprocessor writes it, has no
// directive but line markers (`# 12 "a.h"`, #line) and #pragma (and for the host compiler's
// -fdirectives-only text, #define and #undef); anything else is refused, and so
// are block comments (which could hide where a line starts), trigraphs and pragmas that name
// files. INVALID_ARGUMENT naming the input and the line; other tools' inputs pass.
Expected<void> check_step_input(StepTool tool, std::string_view name, std::string_view bytes);

// Whether a daemon may run this host step itself: the host compiler's flags only (the daemon
// adds `-c INPUT -o object`), one input, the preprocessed text. Refused, naming the argument:
// anything that names a file or folder ('/' anywhere, -I and the like, -o, -M*, -B, -specs,
// -wrapper, -fplugin, -save-temps, -fdump-*), or a response file. INVALID_ARGUMENT otherwise;
// the launcher then compiles the object itself.
// clang's host side (`-cc1` first) runs as clang -cc1 ARGS -o object TEXT: its -cc1 options only
// (k_clang_host_options), the host triple once, -aux-triple the device's, and besides the text
// (the first input) only the device images it embeds (-fcuda-include-gpubinary NAME).
Expected<void> check_host_run(const StepSpec& spec);

// Whether input `name` of this step is a device image a clang host compile embeds as bytes
// (-fcuda-include-gpubinary), not text it reads: check_step_input does not read it as text.
bool is_embedded_step_input(const StepSpec& spec, std::string_view name);

// A host compiler's identity (StepSpec::tool_digest of a host step): SHA-256s of its driver, of
// its compiler proper (`proper`, as `-print-prog-name=` names it: cc1plus; none when empty) and of
// what `--version` prints, through step_tool_identity. `digest_of` hashes a file (the launcher
// keeps its digests by file identity). The launcher and the daemon both name compilers this way.
Expected<Digest> host_compiler_identity(const std::string& driver, const std::string& proper,
                                        const std::function<Expected<Digest>(const std::string&)>& digest_of);

// clang's identity as a host compiler run as `clang -cc1` (the host side of a CUDA compile): its
// program and libraries (clang_identity_files), through step_tool_identity.
Expected<Digest> clang_compiler_identity(const std::string& clang,
                                         const std::function<Expected<Digest>(const std::string&)>& digest_of);

// A tool's identity (StepSpec::tool_digest) from the SHA-256s of the files it is made of, in
// order: cicc's program, then libdevice.10.bc; clang's files (clang_identity_files), then
// libdevice.10.bc; ptxas's program; the host compiler's driver and compiler proper. The launcher and the daemon each hash their own files.
Digest step_tool_identity(StepTool tool, std::span<const Digest> files);

// A device step tool's identity from its program and the library it links: libdevice.10.bc (cicc
// and clang), libcudadevrt.a (nvlink), none for ptxas: the files of step_tool_identity's list, in its order, each hashed by
// `digest_of`. The launcher (its plan's programs, its digests kept by file identity) and the
// daemon (its own toolkit) both call this, so their lists cannot drift apart.
Expected<Digest> device_tool_identity(StepTool tool, const std::string& program, const std::string& libdevice,
                                      const std::function<Expected<Digest>(const std::string&)>& digest_of);

// The key of a step: its tool and identity, arguments, input names with the SHA-256 of each
// input's bytes (in order), and output names.
Key compute_step_key(const StepSpec& spec, std::span<const Digest> input_digests);

}  // namespace kcache
