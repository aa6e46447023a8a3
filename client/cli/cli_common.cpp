#include "cli_common.hpp"

#include "file_names.hpp"
#include "input_file.hpp"
#include "kcache/source_headers.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace kcache::cli {

int exit_code_for(const Error& e) {
  switch (e.code) {
    case ErrorCode::k_invalid_argument:
    case ErrorCode::k_failed_precondition:
    case ErrorCode::k_resource_exhausted:
    case ErrorCode::k_unimplemented: return k_exit_bad_input;
    case ErrorCode::k_not_found: return k_exit_not_found;
    case ErrorCode::k_unauthenticated:
    case ErrorCode::k_permission_denied: return k_exit_denied;
    case ErrorCode::k_unavailable:
    case ErrorCode::k_deadline_exceeded: return k_exit_unavailable;
    default: return k_exit_error;
  }
}

void GlobalFlags::add_to(CLI::App& app) {
  // Subcommands added after this take the global flags too: `kcache compile x.ll --json`.
  app.fallthrough();
  app.add_option("--server", server, "kcached address HOST:PORT");
  app.add_flag("--json", json, "Print one JSON object on stdout");
  app.add_option("--timeout", timeout_s, "Seconds to wait for each call")->capture_default_str();
  app.add_flag("--tls", tls, "Connect with TLS (implied by the --tls-* options)");
  app.add_option("--tls-ca", tls_ca_file, "PEM CA bundle that signed kcached's certificate")->check(CLI::ExistingFile);
  app.add_option("--tls-cert", tls_cert_file, "PEM client certificate, for mutual TLS")->check(CLI::ExistingFile);
  app.add_option("--tls-key", tls_key_file, "PEM key of --tls-cert")->check(CLI::ExistingFile)->needs("--tls-cert");
  app.add_option("--token-file", token_file, "File whose first line is the bearer token (else $KCACHE_TOKEN)")
      ->check(CLI::ExistingFile);
}

void JobFlags::add_to(CLI::App& cmd) {
  m_cmd = &cmd;
  cmd.add_option("FILE", files,
                 "Module: LLVM bitcode (.bc), text IR (.ll), PTX (.ptx) or CUDA C++ (.cu, compiled by the daemon's "
                 "NVRTC); several device modules are linked into one image per arch (relocatable device code)")
      ->required();
  cmd.add_option("--side", side, "device or host")->check(CLI::IsMember({"device", "host"}))->capture_default_str();
  cmd.add_option("--format", format, "bc, ll, ptx or cu (default: cu for a .cu file, else inferred from its bytes)")
      ->check(CLI::IsMember({"bc", "ll", "ptx", "cu"}));
  cmd.add_option("--target", target,
                 "Target triple (default: the side's; amdgcn-amd-amdhsa when every arch is an AMD gfx one)");
  cmd.add_option("--arch", archs,
                 "GPU archs, comma-separated: sm_80,sm_90, or AMD target IDs gfx90a,gfx942:sramecc+:xnack-,gfx1100")
      ->delimiter(',');
  cmd.add_option("--emit", emit, "Image kinds, comma-separated: ptx,cubin (NVIDIA), hsaco,amdgcn (AMD) or obj (host)")->delimiter(',');
  cmd.add_option("-O", opt_level, "Optimisation level 0..3")->check(CLI::Range(0u, 3u))->capture_default_str();
  cmd.add_flag("-g,--debug", debug, "Keep full debug info");
  cmd.add_flag("--lineinfo", lineinfo, "Keep line tables only");
  cmd.add_flag("--fast-math", fast_math, "Allow unsafe floating-point optimisations");
  cmd.add_option("--entry", entries, "Export this function as a kernel (repeatable)");
  cmd.add_option("--cpu", cpu, "Host CPU (host jobs)");
  cmd.add_option("--host-runtime", guard,
                 "Host jobs: reject device-only (gpu_*, rtlib, NVVM) references, or stub them with functions "
                 "that fail loudly when called")
      ->check(CLI::IsMember({"reject", "stub"}))
      ->capture_default_str();
  cmd.add_option("-I,--include-dir", include_dirs,
                 "CUDA C++: a folder where the headers the source includes are found; they are sent with it")
      ->check(CLI::ExistingDirectory);
  m_define = cmd.add_option("-D,--define", defines, "CUDA C++: define a macro, NAME or NAME=VALUE (repeatable)");
  m_undefine = cmd.add_option("-U,--undefine", undefines, "CUDA C++: undefine a macro (repeatable)");
  cmd.add_option("--std", std, "CUDA C++: the language standard, c++17 (NVRTC's default when absent)");
  cmd.add_option("--name-expr", name_exprs,
                 "CUDA C++: a kernel or template instantiation to name, 'scale<float>'; its lowered (mangled) "
                 "name comes back (repeatable)");
  cmd.add_option("-X,--nvrtc-option", nvrtc_options,
                 "CUDA C++: another NVRTC option from kcached's allow-list (--use_fast_math, -rdc=true, "
                 "--maxrregcount=64, -dopt=off, ...; repeatable)");
  cmd.add_option("--driver", driver,
                 "CUDA version of the driver that will load the images (12.4, as nvidia-smi shows it): PTX at an "
                 "ISA it JITs, and PTX in place of cubins it cannot load (default: for the daemon's own toolkit)");
  cmd.add_option("--amd-code-object", amd_code_object,
                 "AMD: the newest HSA code object version the runtime that loads the images takes (4 for ROCm 5 "
                 "and Debian's HIP 5.2; default: the daemon's own, 5, and 6 for generic targets)")
      ->check(CLI::Range(k_min_amd_code_object, k_max_amd_code_object));
  for (CLI::Option* o : cmd.get_options()) {
    if (!o->get_positional()) o->allow_extra_args(false);
  }
}

std::vector<std::string> JobFlags::macro_options() const {
  std::vector<std::string> out;
  std::size_t d = 0, u = 0;
  if (m_cmd != nullptr) {  // flags from a command line; a manifest's come without one
    for (const CLI::Option* o : m_cmd->parse_order()) {  // one entry per value: they take one each
      if (o == m_define && d < defines.size()) out.push_back("-D" + defines[d++]);
      if (o == m_undefine && u < undefines.size()) out.push_back("-U" + undefines[u++]);
    }
  }
  for (; d < defines.size(); ++d) out.push_back("-D" + defines[d]);
  for (; u < undefines.size(); ++u) out.push_back("-U" + undefines[u]);
  return out;
}

JobFiles JobFlags::job() const {
  JobFiles job;
  job.files = files;
  if (!format.empty()) job.format = parse_format(format);
  job.include_dirs = include_dirs;
  job.archs = archs;
  job.kinds = kinds();
  job.driver = parse_driver_flag(driver);
  JobSpec& spec = job.spec;
  spec.side = *parse_side(side);
  spec.target = target;
  spec.options.opt_level = opt_level;
  spec.options.debug_info = debug;
  spec.options.lineinfo = lineinfo;
  spec.options.fast_math = fast_math;
  spec.options.entry_points = entries;
  spec.options.cpu = cpu;
  spec.options.guard = guard == "stub" ? HostGuard::stub : HostGuard::reject;
  spec.amd_code_object_cap = static_cast<int>(amd_code_object);
  bool source_flags = !include_dirs.empty() || !defines.empty() || !undefines.empty() || !std.empty() ||
                      !name_exprs.empty() || !nvrtc_options.empty();
  // Whether the job is CUDA C++ is known from --format and the module's name (kcache/job.hpp).
  if (files.empty() || format_named(job.format, files.front()) != InputFormat::cuda_cpp) {
    if (source_flags) fail(k_exit_usage, "-I, -D, -U, --std, --name-expr and -X are for CUDA C++ sources (.cu)");
    return job;
  }
  SourceJob& source = spec.source;
  if (!std.empty()) source.nvrtc_options.push_back("--std=" + std);
  source.nvrtc_options.insert(source.nvrtc_options.end(), nvrtc_options.begin(), nvrtc_options.end());
  std::vector<std::string> macros = macro_options();
  source.nvrtc_options.insert(source.nvrtc_options.end(), macros.begin(), macros.end());
  source.name_expressions = name_exprs;
  return job;
}

JobInput read_job(const JobFiles& job, std::uint64_t max_module_bytes) {
  JobInput in;
  in.spec = job.spec;
  in.archs = job.archs;
  in.kinds = job.kinds;
  in.driver = job.driver;
  JobSpec& spec = in.spec;
  spec.linked_formats.clear();
  // kcached's --max-module-size covers a job's modules and headers together (wire::module_bytes):
  // each file is read within what the files before it left.
  std::uint64_t used = 0;
  for (const std::string& file : job.files) {
    std::string source = "kcached's --max-module-size";
    if (used > 0) {
      source += " (" + std::to_string(max_module_bytes) + " bytes for all of a job's modules, less the " +
                std::to_string(used) + " of the files before it)";
    }
    in.modules.push_back(read_file(file, {max_module_bytes - used, source}));
    used += in.modules.back().size();
    std::optional<InputFormat> named = format_named(job.format, file);
    InputFormat f = named ? *named : infer_format(in.modules.back());
    if (in.modules.size() == 1) {
      spec.format = f;
    } else {
      spec.linked_formats.push_back(f);
    }
  }
  if (spec.side == Side::device && spec.target.empty()) spec.target = implied_device_target(job.archs);
  if (!spec.is_source()) return in;
  if (job.files.size() != 1) {
    fail(k_exit_usage, "a CUDA C++ job compiles one .cu file; the files it includes are sent with it");
  }
  std::vector<std::filesystem::path> dirs(job.include_dirs.begin(), job.include_dirs.end());
  std::filesystem::path source_dir = std::filesystem::path(job.files[0]).parent_path();
  auto headers =
      collect_headers(in.modules[0], source_dir.empty() ? "." : source_dir, dirs, max_module_bytes - used);
  if (!headers) fail(k_exit_usage, headers.error().message);
  for (CollectedHeader& h : *headers) {
    spec.source.headers.push_back({h.name, sha256(h.bytes)});
    in.headers.emplace_back(std::move(h.name), std::move(h.bytes));
  }
  return in;
}

std::vector<ImageKind> JobFlags::kinds() const {
  std::vector<ImageKind> out;
  for (const std::string& e : emit) {
    auto kind = parse_kind(e);
    if (!kind) fail(k_exit_usage, "--emit: " + unknown_kind_error(e).message);
    out.push_back(*kind);
  }
  return out;
}

void OutputFlags::add_to(CLI::App& cmd) {
  auto* o = cmd.add_option("-o,--output", out_file, "Write the one image to FILE");
  auto* d = cmd.add_option("--out-dir", out_dir, "Write each image to DIR/ARCH.KIND (sm_90.cubin, x86_64.o)");
  o->excludes(d);
}

CudaVersion parse_driver_flag(const std::string& text) {
  if (text.empty()) return 0;
  auto version = parse_cuda_version(text);
  if (!version) fail(k_exit_usage, "--driver: " + version.error().message);
  return *version;
}

void fail(int code, std::string message) { throw Failure{code, std::move(message), {}}; }
void fail(const Error& e) { fail(exit_code_for(e), e); }
void fail(int code, const Error& e) {
  throw Failure{code, std::string(error_code_name(e.code)) + ": " + e.message, e.details};
}

std::string read_file(const std::string& path, const InputLimit& limit) {
  auto bytes = read_input_file(path, limit);
  if (!bytes) {
    fail(bytes.error().code == ErrorCode::k_resource_exhausted ? k_exit_bad_input : k_exit_usage,
         bytes.error().message);
  }
  return std::move(*bytes);
}

namespace {

// Whether `path` is a regular file holding exactly `data`.
bool holds(const std::filesystem::path& path, std::string_view data) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  bool same = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && static_cast<std::uint64_t>(st.st_size) == data.size();
  std::string existing(same ? data.size() : 0, '\0');
  for (std::size_t at = 0; same && at < existing.size();) {
    ssize_t n = ::read(fd, existing.data() + at, existing.size() - at);
    if (n <= 0) same = false;
    else at += static_cast<std::size_t>(n);
  }
  ::close(fd);
  return same && existing == data;
}

}  // namespace

void write_file(const std::filesystem::path& path, std::string_view data) {
  // An output already holding these exact bytes (a build step run again) is kept and given the
  // time of now, as a rewrite would: the build tool sees a fresh output, and the file system is
  // spared truncating and writing it again (on ext4, a truncated file is flushed on close).
  if (holds(path, data) && ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0) == 0) return;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(k_exit_error, "cannot write " + path.string() + ": " + std::strerror(errno));
  f.write(data.data(), static_cast<std::streamsize>(data.size()));
  f.close();
  if (!f) fail(k_exit_error, "cannot write " + path.string() + ": " + std::strerror(errno));
}

void make_directories(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(k_exit_error, "cannot create the folder " + dir.string() + ": " + ec.message());
  if (!std::filesystem::is_directory(dir, ec)) fail(k_exit_error, "cannot write into " + dir.string() + ": not a folder");
}

void check_file_name(std::string_view what, std::string_view part) {
  if (auto ok = check_file_name_part(what, part); !ok) fail(k_exit_error, ok.error().message);
}

}  // namespace kcache::cli
