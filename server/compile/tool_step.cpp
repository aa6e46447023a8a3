#include "compile/tool_step.hpp"

#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "kcache/process.hpp"

namespace kcache::server {
namespace {

std::filesystem::path cicc_path(const Toolchain& t) { return t.cuda_root / "nvvm" / "bin" / "cicc"; }

// The clang of the LLVM kcached is built with (found at configure time), else Debian's clang-22.
std::filesystem::path clang_path() {
  std::error_code ec;
  for (const char* candidate : {KCACHE_CLANG_PATH, "/usr/lib/llvm-22/bin/clang"}) {
    if (*candidate != '\0' && std::filesystem::exists(candidate, ec)) return candidate;
  }
  return {};
}

// The toolkit's libcudadevrt.a, which nvlink links for -lcudadevrt; empty when absent.
std::filesystem::path cudadevrt_path(const Toolchain& t) {
  std::error_code ec;
  for (std::string_view folder : k_toolkit_library_folders) {
    std::filesystem::path p = t.cuda_root / folder / k_step_cudadevrt;
    if (std::filesystem::exists(p, ec)) return p;
  }
  return {};
}

// Whether `folder`, as a client's plan names it (/usr/local/cuda/bin/../targets/x86_64-linux/lib),
// is one of this toolkit's library folders or their stubs: a path under the toolkit's root as
// kcached names it or as it resolves (/usr/local/cuda-13.0: CMake names the toolkit so), the two
// spellings that exist in the jail, that resolves to one of them. nvlink writes the folder into
// what it links, so it runs on the folder as named.
bool is_toolkit_library_folder(const Toolchain& t, const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path asked = fs::path(folder).lexically_normal();
  const fs::path real_root = fs::canonical(t.cuda_root, ec);
  if (ec) return false;
  auto under = [&](const fs::path& root) {
    std::string r = root.lexically_normal().string();
    while (r.size() > 1 && r.ends_with('/')) r.pop_back();
    return asked.string().starts_with(r + "/");
  };
  if (!asked.is_absolute() || !(under(t.cuda_root) || under(real_root))) return false;
  const fs::path resolved = fs::canonical(asked, ec);
  if (ec) return false;
  for (std::string_view lib : k_toolkit_library_folders) {
    for (const fs::path& candidate : {real_root / lib, real_root / lib / "stubs"}) {
      std::error_code missing;
      if (fs::path library = fs::canonical(candidate, missing); !missing && library == resolved) return true;
    }
  }
  return false;
}

// The tool's program, and for cicc the folder it reads libdevice from (NVVMIR_LIBRARY_DIR).
Expected<std::filesystem::path> program(const Toolchain& t, StepTool tool) {
  std::error_code ec;
  if (tool == StepTool::host) return make_error(ErrorCode::k_internal, "a host step names its compiler itself");
  if (tool == StepTool::cicc && t.cuda_present && std::filesystem::exists(cicc_path(t), ec) && !t.libdevice.empty()) {
    return cicc_path(t);
  }
  if (tool == StepTool::ptxas && t.cuda_present) return t.ptxas;
  if (tool == StepTool::nvlink && t.cuda_present && !t.nvlink.empty() && !cudadevrt_path(t).empty()) return t.nvlink;
  if (tool == StepTool::clang && !t.libdevice.empty() && !clang_path().empty()) return clang_path();
  return make_error(ErrorCode::k_failed_precondition,
                    "this kcached has no " + std::string(step_tool_name(tool)) + " (CUDA toolkit at '" +
                        t.cuda_root.string() + "'): the client runs the step itself");
}

// A folder of the worker's own, removed with everything in it when the step ends.
class StepFolder {
 public:
  StepFolder() {
    std::string pattern = (std::filesystem::temp_directory_path() / "kcache-step-XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) m_path = pattern;
  }
  ~StepFolder() {
    std::error_code ec;
    if (!m_path.empty()) std::filesystem::remove_all(m_path, ec);
  }
  StepFolder(const StepFolder&) = delete;
  StepFolder& operator=(const StepFolder&) = delete;
  const std::filesystem::path& path() const { return m_path; }

 private:
  std::filesystem::path m_path;
};

}  // namespace

Expected<StepRun> run_step(const Toolchain& toolchain, const StepWork& work) {
  const bool host = work.tool == StepTool::host;
  auto tool = host ? Expected<std::filesystem::path>(work.program) : program(toolchain, work.tool);
  if (!tool) return tool.error();
  if (tool->empty()) return make_error(ErrorCode::k_internal, "a host step without its compiler");
  // nvlink searches its -L folders for -lcudadevrt (whose digest is in the identity): they must
  // be this daemon's toolkit's, as the client's plan names them (nvlink writes them into the cubin).
  // A link that names no library reads no folder: its -L folders are only words nvlink writes
  // into the image (clang's nvlink names clang's own lib folder so).
  if (work.tool == StepTool::nvlink) {
    const bool libraries = std::any_of(work.args.begin(), work.args.end(), [](const std::string& a) { return a.starts_with("-l"); });
    for (const std::string& arg : work.args) {
      if (!arg.starts_with("-L")) continue;
      if (!libraries && arg.size() > 2 && arg[2] == '/') continue;
      if (!is_toolkit_library_folder(toolchain, arg.substr(2))) {
        return make_error(ErrorCode::k_failed_precondition,
                          "nvlink's folder '" + arg.substr(2, 200) + "' is not this kcached's toolkit's (" +
                              toolchain.cuda_root.string() + "): the client links it itself");
      }
    }
  }
  StepFolder folder;
  if (folder.path().empty()) return make_error(ErrorCode::k_internal, "cannot make a folder for the step");
  for (const auto& [name, bytes] : work.inputs) {
    std::ofstream out(folder.path() / name, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return make_error(ErrorCode::k_internal, "cannot write the step's input " + name);
  }
  // A clang step links libdevice by a plain name: this daemon's own (its digest is in the identity).
  if (work.tool == StepTool::clang) {
    std::error_code ec;
    std::filesystem::create_symlink(toolchain.libdevice, folder.path() / k_step_libdevice, ec);
    if (ec) return make_error(ErrorCode::k_internal, "cannot give the step libdevice: " + ec.message());
  }
  std::vector<std::string> argv = {tool->string()};
  argv.insert(argv.end(), work.args.begin(), work.args.end());
  // A host compile's flags come alone (check_host_run): the daemon names its input and object.
  if (host && !work.inputs.empty() && !work.outputs.empty()) {
    if (!work.args.empty() && work.args.front() == "-cc1") {  // clang's host side: its text last, after -x
      argv.insert(argv.end(), {"-o", work.outputs.front(), work.inputs.front().first});
    } else {
      argv.insert(argv.end(), {"-c", work.inputs.front().first, "-o", work.outputs.front()});
    }
  }
  // The tool sees nothing of the daemon's environment but where libdevice is.
  std::vector<std::string> env = {"PATH=/usr/bin:/bin", "LC_ALL=C", "TMPDIR=/tmp",
                                  "NVVMIR_LIBRARY_DIR=" + (toolchain.cuda_root / "nvvm" / "libdevice").string()};
  ProcessOptions options;
  options.output = ProcessOptions::Output::separate;
  options.env = &env;
  options.deadline = work.deadline;
  options.max_output = 4ULL << 20;
  options.kill_past_max_output = true;
  auto ran = run_tool(toolchain, argv, folder.path(), options);
  if (!ran) return ran.error();
  StepRun out;
  out.exit_code = ran->signal != 0 ? 128 + ran->signal : ran->exit_code;
  out.stdout_text = std::move(ran->output);
  out.stderr_text = std::move(ran->error_output);
  if (out.exit_code != 0) return out;
  for (const std::string& name : work.outputs) {
    std::filesystem::path path = folder.path() / name;
    std::error_code ec;
    auto size = std::filesystem::file_size(path, ec);
    if (ec || !std::filesystem::is_regular_file(path, ec)) {
      return make_error(ErrorCode::k_internal, std::string(step_tool_name(work.tool)) + " exited 0 without writing " +
                                                   name + ", which the step declares as an output");
    }
    if (size > k_max_step_output) {
      return make_error(ErrorCode::k_resource_exhausted, std::string(step_tool_name(work.tool)) + " wrote " +
                                                             std::to_string(size) + " bytes to " + name +
                                                             "; a step's output may have 256 MiB at most");
    }
    std::ifstream in(path, std::ios::binary);
    out.outputs.emplace_back(name, std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  }
  return out;
}

Expected<Digest> own_step_tool_identity(const Toolchain& toolchain, StepTool tool) {
  auto path = program(toolchain, tool);
  if (!path) return path.error();
  const std::string library = tool == StepTool::nvlink ? cudadevrt_path(toolchain).string() : toolchain.libdevice.string();
  return device_tool_identity(tool, path->string(), library, [](const std::string& p) -> Expected<Digest> {
    auto digest = sha256_file(p);
    if (!digest) return make_error(ErrorCode::k_internal, "cannot read " + p);
    return *digest;
  });
}

}  // namespace kcache::server
