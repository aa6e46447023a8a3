// What a compile job is, independent of the wire: sides, input formats, image kinds, SM archs,
// and the options that select the generated code. Shared by server and client.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/expected.hpp"
#include "kcache/sha256.hpp"

namespace kcache {

enum class Side : std::uint8_t { device = 1, host = 2 };
// cuda_cpp: CUDA C++ source, compiled by NVRTC (a source job: see JobSpec::source).
enum class InputFormat : std::uint8_t { llvm_bitcode = 1, llvm_text = 2, ptx = 3, cuda_cpp = 4 };
// ltoir: NVVM IR for link-time optimisation (NVRTC -dlto), linked later by nvJitLink.
// hsaco: an AMD HSA code object (ELF, EM_AMDGPU) for one target ID; amdgcn: its assembly text.
// file: an output of a build step (kcache/step.hpp), named by its arch field; never asked of a
// compile, so not among all_kinds().
enum class ImageKind : std::uint8_t { ptx = 1, cubin = 2, object = 3, ltoir = 4, hsaco = 5, amdgcn = 6, file = 7 };

inline constexpr std::string_view k_device_triple = "nvptx64-nvidia-cuda";

// A compile's outcome, with the values of kcache.v1.Outcome.
enum class Outcome : std::uint8_t { hit = 1, miss = 2, coalesced = 3 };

std::string_view side_name(Side side);                  // "device", "host"
std::optional<Side> parse_side(std::string_view name);
std::span<const Side> all_sides();                      // device, host: the order messages list them
std::string_view format_name(InputFormat format);       // "bc", "ll", "ptx", "cu"
std::optional<InputFormat> parse_format(std::string_view name);
std::string_view kind_name(ImageKind kind);             // "ptx", "cubin", "obj", "ltoir", "hsaco", "amdgcn"
std::string_view kind_extension(ImageKind kind);        // file extension: "ptx", "cubin", "o", "ltoir", "hsaco", "s"
std::optional<ImageKind> parse_kind(std::string_view name);
// Every kind, in the order messages list them: ptx, cubin, ltoir, hsaco, amdgcn, obj.
std::span<const ImageKind> all_kinds();
std::string_view outcome_name(Outcome outcome);         // "hit", "miss", "coalesced"

// INVALID_ARGUMENT "unknown image kind 'TEXT' (use ptx, cubin, ltoir, hsaco, amdgcn or obj)",
// the list made from all_kinds(): for a name parse_kind refuses.
Error unknown_kind_error(std::string_view text);
// INVALID_ARGUMENT "unknown side 'TEXT' (use device or host)": for a name parse_side refuses.
Error unknown_side_error(std::string_view text);
// The side an image kind belongs to (a build step's file: the device; a host step keeps what its
// compile printed beside its object, see Store::put).
Side kind_side(ImageKind kind);
// Whether a device image kind is AMD's (hsaco, amdgcn) rather than NVIDIA's.
bool is_amd_kind(ImageKind kind);

// Guesses the format of module bytes: bitcode magic, PTX directives, else LLVM text IR (CUDA
// C++ is never guessed: a source job says so).
InputFormat infer_format(std::string_view bytes);
// The format of a module's file before its bytes are read: `stated` when given, else cu for a
// file named *.cu; nullopt: infer_format decides. So whether a module is CUDA C++ is known from
// its name and the format stated, never from its bytes.
std::optional<InputFormat> format_named(std::optional<InputFormat> stated, std::string_view file);

// An NVIDIA SM architecture: sm_90 is {9, 0, 0}; sm_90a is {9, 0, 'a'}; sm_100f is {10, 0, 'f'}.
struct SmArch {
  int major = 0;
  int minor = 0;
  char variant = 0;  // 0, 'a' (arch-specific) or 'f' (family-specific)

  std::string str() const;
  int number() const { return major * 10 + minor; }
  bool operator==(const SmArch&) const = default;
};
// Parses "sm_XY", "sm_XYZ", with an optional 'a' or 'f' suffix.
std::optional<SmArch> parse_sm_arch(std::string_view text);
// Whether `text` names a GPU: an SM arch, or a valid AMD target ID (kcache/amd_target.hpp).
bool is_device_arch(std::string_view text);

// What the host guard does with references to device-only symbols (see server/compile/guard.hpp).
enum class HostGuard : std::uint8_t { reject = 0, stub = 1 };

// The options that change the generated code; every field is part of the key.
struct CompileOptions {
  std::uint32_t opt_level = 2;
  bool debug_info = false;
  bool lineinfo = false;
  bool fast_math = false;
  std::vector<std::string> entry_points;
  std::string cpu;  // host only
  HostGuard guard = HostGuard::reject;  // host only; device jobs are canonicalised to reject
};

// A header a CUDA C++ job carries: the name its #include spells, and the SHA-256 of its bytes.
struct SourceHeader {
  std::string name;
  Digest digest{};
  bool operator==(const SourceHeader&) const = default;
};

// What a CUDA C++ source job adds (format cuda_cpp). The source is the job's module; its headers
// travel with it, since the daemon never reads a client's include folders.
struct SourceJob {
  std::vector<SourceHeader> headers;            // sorted by name, names unique
  std::vector<std::string> nvrtc_options;       // canonical (canonical_nvrtc_options)
  std::vector<std::string> name_expressions;    // sorted, unique: "scale<float>"
};

// Limits of a source job.
inline constexpr std::size_t k_max_source_headers = 4096;
inline constexpr std::size_t k_max_header_name = 512;
inline constexpr std::size_t k_max_nvrtc_options = 256;
inline constexpr std::size_t k_max_name_expressions = 4096;

// The NVRTC options of a source job, checked against the allow-list and made canonical: one
// spelling per option (`--std=c++17`, `-DNAME=VALUE`, `--maxrregcount=N`...), flags sorted and
// deduplicated, and for each macro only its last -D or -U (macros of different names do not
// interact; for one name, the last one decides), sorted by name after the flags. Options that
// touch files on the daemon (-I, --include-path, --pre-include, --pch...), the arch (it comes
// from the job) and -dlto (ask for ltoir images instead) are INVALID_ARGUMENT.
Expected<std::vector<std::string>> canonical_nvrtc_options(const std::vector<std::string>& options);

// A job without its module bytes and without the archs/kinds it asks for (those name images
// under the key, not the key).
struct JobSpec {
  Side side = Side::device;
  InputFormat format = InputFormat::llvm_text;  // of the first (usually only) module
  // Formats of the modules linked after the first, in order: relocatable device code (clang
  // -fgpu-rdc, multi-file CUDA projects) sends several modules that become one image per arch.
  std::vector<InputFormat> linked_formats;
  std::string target;  // target triple; empty means the side's default
  CompileOptions options;
  // Device: the newest PTX ISA (84 is 8.4) the client's driver JITs, when that is below what the
  // daemon emits (kcache/driver.hpp, ptx_isa_cap_for); 0: the daemon's own newest. Its cubins
  // are then left out: they come from a toolkit newer than the driver.
  int ptx_isa_cap = 0;
  // AMD: the newest code object version the client's runtime loads, when below what the daemon
  // writes (4 or 5; canonicalize makes 6 and up 0): 0, the daemon's own (5, 6 for generic
  // targets, which need 6).
  int amd_code_object_cap = 0;
  SourceJob source;  // format cuda_cpp only; empty otherwise

  std::size_t module_count() const { return 1 + linked_formats.size(); }
  // Whether any module is PTX (such a job can emit cubin only: PTX is linked by nvJitLink).
  bool has_ptx_input() const;
  // Whether this is a CUDA C++ source job (format cuda_cpp).
  bool is_source() const;
};

// The HSA code object versions LLVM 22 writes (JobSpec::amd_code_object_cap).
inline constexpr int k_min_amd_code_object = 4;
inline constexpr int k_max_amd_code_object = 6;

// The most modules one job may link.
inline constexpr std::size_t k_max_job_modules = 64;

// kcached's --max-module-size when none is given: the most bytes of modules and headers one job
// may send. A client that cannot ask the daemon reads its files within this bound.
inline constexpr std::uint64_t k_default_max_module_bytes = 64ULL << 20;

// The (arch, kind) pairs a request asks for, one image each.
struct ImageRequest {
  std::string arch;
  ImageKind kind = ImageKind::ptx;
  bool operator==(const ImageRequest&) const = default;
};

// The device triple a job's archs imply when the job names none: amdgcn-amd-amdhsa when every
// arch is an AMD target ID (gfx...), else empty (the side's default, NVPTX). Mixed archs are left
// for plan_images to refuse.
std::string implied_device_target(const std::vector<std::string>& archs);

// Whether a (canonical) device job targets AMD GPUs.
bool targets_amd(const JobSpec& spec);

// The rule for the fields only CUDA C++ source jobs have: a job whose format is not cu carries no
// headers, NVRTC options or name expressions (INVALID_ARGUMENT naming its format otherwise). Part
// of canonicalize. A client checks its own spelling of them (flags, manifest fields, include
// folders) before it reads a file, by the module's format_named.
Expected<void> check_source_fields(const JobSpec& spec);

// Checks what can be checked without a toolchain: option ranges, kinds against the side,
// arch syntax, the arch count, linked modules (device only, at most k_max_job_modules). On success the spec is canonical (sorted entry points, default
// target filled in, lineinfo folded into debug_info), so equal jobs give equal keys.
Expected<void> canonicalize(JobSpec& spec, std::string_view host_triple);

// The images a job asks for, in order: every arch x every kind for the device (kinds default to
// PTX); one object for the host (arch = the triple's CPU architecture). `spec` must be canonical.
Expected<std::vector<ImageRequest>> plan_images(const JobSpec& spec, const std::vector<std::string>& archs,
                                                const std::vector<ImageKind>& kinds);

// `images` with PTX in place of every cubin, in order; an arch that asked for both keeps one PTX.
// For a client whose driver cannot load this toolkit's cubins: it JITs the PTX instead.
std::vector<ImageRequest> ptx_in_place_of_cubins(const std::vector<ImageRequest>& images);

// The CPU architecture name of a triple ("x86_64-pc-linux-gnu" -> "x86_64"): a host image's arch.
std::string triple_arch(std::string_view triple);

// Parses a byte count: plain digits or with a K, M, G or T suffix (powers of 1024).
std::optional<std::uint64_t> parse_size(std::string_view text);

}  // namespace kcache
