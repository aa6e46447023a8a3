#include "launcher/direct_key.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "endpoint.hpp"
#include "kcache/files.hpp"
#include "kcache/search_path.hpp"
#include "launcher/local_objects.hpp"
#include "launcher/local_stats.hpp"
#include "launcher/nvcc_plan.hpp"
#include "launcher/options.hpp"
#include "launcher/tool_identity.hpp"

extern char** environ;

namespace kcache::launcher {
namespace {

namespace fs = std::filesystem;
using namespace std::string_literals;

// The environment a compile's result depends on, beyond its command line.
constexpr std::string_view k_direct_environment[] = {
    "PATH", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN",
    "SOURCE_DATE_EPOCH", "GCC_EXEC_PREFIX", "COMPILER_PATH", "LANG", "LC_ALL", "LC_MESSAGES", "KCACHE_BASE_DIR"};

// The environment that reaches a compile, as a key's text: "\0env\0NAME=VALUE" for each.
std::string environment_text(const std::map<std::string, std::string>& env) {
  std::string out;
  for (std::string_view name : k_direct_environment) {
    auto it = env.find(std::string(name));
    out += "\0env\0"s + std::string(name) + '=' + (it == env.end() ? "" : it->second);
  }
  return out;
}

// The PATH a compile's programs are searched on.
std::string_view search_of(const std::map<std::string, std::string>& env) {
  auto path_of = env.find("PATH");
  return path_of == env.end() ? k_default_path : std::string_view(path_of->second);
}

// The nvcc program `nvcc` names, its real path (its toolkit is the folder above its own); empty
// when none.
fs::path nvcc_program(const std::string& nvcc, const std::map<std::string, std::string>& env) {
  std::error_code ec;
  fs::path program = fs::canonical(search_path(nvcc, search_of(env)), ec);
  return ec ? fs::path() : program;
}

// Writes `bytes` at `target` whole or not at all (a temporary beside it, renamed).
bool write_into_place(const std::string& target, std::string_view bytes) {
  const std::string staged = target + ".kcache-" + std::to_string(::getpid());
  std::FILE* f = std::fopen(staged.c_str(), "wb");
  if (f == nullptr) return false;
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  ok = std::fclose(f) == 0 && ok;
  std::error_code ec;
  if (ok) fs::rename(staged, target, ec);
  if (!ok || ec) fs::remove(staged, ec);
  return ok && !ec;
}

}  // namespace

std::optional<std::string> nvcc_tools(const std::string& nvcc, const std::map<std::string, std::string>& env,
                                      const std::vector<std::string>& args) {
  const fs::path program = nvcc_program(nvcc, env);
  if (program.empty()) return std::nullopt;
  const fs::path top = program.parent_path().parent_path();
  std::string out;
  for (const fs::path& file : {program, top / "bin" / "nvcc.profile", top / "bin" / "cudafe++", top / "bin" / "fatbinary",
                               top / "bin" / "ptxas", top / "nvvm" / "bin" / "cicc", top / "nvvm" / "libdevice" / "libdevice.10.bc"}) {
    auto digest = file_digest(file.string());
    if (!digest) return std::nullopt;
    out += file.filename().string() + '=' + to_hex(*digest) + '\n';
  }
  std::string host = "gcc";
  if (auto it = env.find("NVCC_CCBIN"); it != env.end() && !it->second.empty()) host = it->second;
  for (const Arg& a : read_args(nvcc_options(), args)) {
    if (a.spelling == "-ccbin" || a.spelling == "--compiler-bindir") host = a.value;
  }
  // A folder names the host compiler in it, as nvcc reads it.
  std::error_code ec;
  if (fs::is_directory(host, ec)) host = (fs::path(host) / "gcc").string();
  auto identity = host_driver_identity(search_path(host, search_of(env)), "cc1plus");
  if (!identity) return std::nullopt;
  return out + "host=" + to_hex(*identity);
}

Digest direct_key_of(const std::string& tools, const DirectArgs& args, const std::map<std::string, std::string>& env,
                     const fs::path& folder) {
  std::string text = "kcache-direct 2"s + '\0' + tools;
  text += "\0folder\0"s + (args.folder_matters ? folder.string() : "");
  text += environment_text(env);
  for (const std::string& w : args.words) text += "\0arg\0"s + w;
  text += "\0dependency-target\0"s + args.dependency_target;
  return sha256(text);
}

StepSpec ObjectName::spec() const {
  StepSpec out;
  out.tool = tool;
  out.tool_digest = identity;
  out.args = key_args;
  for (const auto& [name, digest] : inputs) out.inputs.push_back(name);
  out.outputs = {std::string(k_step_object)};
  return out;
}

Key ObjectName::key() const {
  std::vector<Digest> digests;
  for (const auto& [name, digest] : inputs) digests.push_back(digest);
  return compute_step_key(spec(), digests);
}

std::optional<ObjectName> device_link_name(const std::string& nvcc, const std::map<std::string, std::string>& env,
                                           const std::vector<std::string>& args) {
  auto tools = nvcc_tools(nvcc, env, args);
  if (!tools) return std::nullopt;
  auto nvlink_digest = file_digest((nvcc_program(nvcc, env).parent_path() / "nvlink").string());
  if (!nvlink_digest) return std::nullopt;
  std::string text = "kcache-device-link 2"s + '\0' + *tools + "\0nvlink\0"s + to_hex(*nvlink_digest);
  text += environment_text(env);
  std::vector<std::string> folders;
  const std::vector<Arg> read = read_args(nvcc_options(), args);
  for (const Arg& a : read) {
    if (a.spelling == "-L" || a.spelling == "--library-path") folders.push_back(a.value);
  }
  auto file = [&](const std::string& path) -> bool {
    auto digest = sha256_file(path);
    if (!digest) return false;
    text += "\0file\0"s + path + '\0' + to_hex(*digest);
    return true;
  };
  for (const Arg& a : read) {
    if (a.affects(k_output)) continue;  // the object's place
    auto first = args.begin() + static_cast<std::ptrdiff_t>(a.index);
    for (auto w = first; w != first + static_cast<std::ptrdiff_t>(a.count); ++w) text += "\0arg\0"s + *w;
    if (a.is_input() && !file(args[a.index])) return std::nullopt;
    if (a.spelling == "-l" || a.spelling == "--library") {
      std::error_code ec;
      std::string path = find_archive(folders, a.value, [&](const std::string& p) { return fs::exists(p, ec); });
      if (!path.empty() && !file(path)) return std::nullopt;
    }
  }
  return ObjectName{StepTool::nvcc, step_tool_identity(StepTool::nvcc, std::vector<Digest>{sha256(*tools)}), {},
                    {{"device-link", sha256(text)}}};
}

std::map<std::string, std::string> this_environment() {
  std::map<std::string, std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view entry(*e);
    auto eq = entry.find('=');
    if (eq != std::string_view::npos) out[std::string(entry.substr(0, eq))] = std::string(entry.substr(eq + 1));
  }
  return out;
}

fs::path manifest_path(const Digest& key) {
  fs::path state = state_dir();
  return state.empty() ? fs::path() : state / "manifests" / to_hex(key).substr(0, 2) / to_hex(key);
}

FileSystem real_file_system() {
  FileSystem out;
  out.stat = [](const std::string& path) -> std::optional<FileState> {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return std::nullopt;
    return FileState{st.st_mtim.tv_sec * 1'000'000'000LL + st.st_mtim.tv_nsec,
                     st.st_ctim.tv_sec * 1'000'000'000LL + st.st_ctim.tv_nsec, static_cast<std::uint64_t>(st.st_size)};
  };
  out.digest = [](const std::string& path) -> std::optional<Digest> {
    auto d = sha256_file(path);
    return d ? std::optional<Digest>(*d) : std::nullopt;
  };
  out.list = [](const std::string& folder) {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(folder, ec)) names.push_back(e.path().filename().string());
    return names;
  };
  return out;
}

std::optional<int> answer_from_this_machine(const std::string& nvcc, const std::vector<std::string>& args) {
  if (std::getenv("KCACHE_NODIRECT") != nullptr) return std::nullopt;
  for (const std::string& a : args) {
    if (a == "--options-file" || a == "-optf" || a.starts_with("--options-file=")) return std::nullopt;
  }
  Invocation one = nvcc_invocation(args);
  if (!one.unchanged.empty() || one.per_source.size() != 1 || one.per_source.front() != args) return std::nullopt;
  const std::map<std::string, std::string> env = this_environment();
  // Where the object lands, what its compile printed printed, counted; false: not so answered.
  auto answer = [&](const LocalObject& object, std::string out, std::string err,
                    std::initializer_list<const char*> counted) {
    if (!write_into_place(object_path(nvcc_options(), args), object.object)) return false;
    out += object.stdout_text;
    err += object.stderr_text;
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fwrite(err.data(), 1, err.size(), stderr);
    LocalStats stats;
    for (const char* name : counted) stats.add(name);
    return true;
  };
  if (one.device_link) {
    auto name = device_link_name(nvcc, env, args);
    auto object = name ? LocalObjects::open().get(name->key()) : std::nullopt;
    if (!object || !answer(*object, {}, {}, {"launcher.device_links", "device_link.local_hit", "device_link.without_grpc"})) {
      return std::nullopt;
    }
    return 0;
  }
  auto view = direct_args(nvcc_options(), args);
  if (!view) return std::nullopt;
  auto tools = nvcc_tools(nvcc, env, args);
  if (!tools) return std::nullopt;
  std::error_code ec;
  const fs::path folder = fs::current_path(ec);
  if (ec) return std::nullopt;
  const fs::path path = manifest_path(direct_key_of(*tools, *view, env, folder));
  if (path.empty()) return std::nullopt;
  auto entries = read_manifest(read_whole_file(path));
  if (!entries) return std::nullopt;
  const FileSystem files = real_file_system();
  for (const ManifestEntry& entry : *entries) {
    auto key = digest_from_hex(entry.object);
    if (!key || !manifest_entry_holds(entry, folder, files)) continue;
    auto object = LocalObjects::open().get(Key{*key});
    if (!object) return std::nullopt;  // the daemon may have it: the full launcher asks
    if (!entry.dependencies.empty() &&
        !write_into_place(dependency_options(nvcc_options(), args).file, entry.dependencies)) {
      return std::nullopt;
    }
    // As the launcher prints a compile: the driver's messages, then each step's, in order.
    // direct.without_grpc: answered before the full client started.
    if (!answer(*object, entry.out, entry.driver + entry.err,
                {"launcher.compiles", "direct.hit", "nvcc.local_hit", "direct.without_grpc"})) {
      return std::nullopt;
    }
    return 0;
  }
  return std::nullopt;
}

std::string next_on_path(const std::string& name) {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  const char* path = std::getenv("PATH");
  return search_path(name, path ? path : k_default_path, [&](const fs::path& candidate) {
    std::error_code e;
    fs::path real = fs::canonical(candidate, e);
    return e || real == self || real.filename() == "kcache" || real.filename() == "kcache-grpc";
  });
}

std::string toolkit_nvcc() {
  std::error_code ec;
  for (const char* variable : {"CUDA_PATH", "CUDA_HOME"}) {
    const char* root = std::getenv(variable);
    if (root == nullptr || *root == '\0') continue;
    fs::path nvcc = fs::path(root) / "bin" / "nvcc";
    if (fs::exists(nvcc, ec)) return nvcc.string();
  }
  return fs::exists("/usr/local/cuda/bin/nvcc", ec) ? "/usr/local/cuda/bin/nvcc" : "";
}

std::optional<int> answer_nvcc_from_this_machine(int argc, char** argv) {
  if (argc < 1) return std::nullopt;
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string nvcc;
  if (compiler_kind(argv[0]) == CompilerKind::nvcc) {
    nvcc = next_on_path(fs::path(argv[0]).filename().string());
    if (nvcc.empty()) nvcc = toolkit_nvcc();
  } else if (!args.empty() && compiler_kind(args.front()) == CompilerKind::nvcc) {
    nvcc = args.front();
    args.erase(args.begin());
  }
  if (nvcc.empty()) return std::nullopt;
  return answer_from_this_machine(nvcc, args);
}

}  // namespace kcache::launcher
