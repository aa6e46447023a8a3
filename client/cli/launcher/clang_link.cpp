// clang's device link, cached: a program linked with `clang++ --offload-link` (-fgpu-rdc) links its
// device code in clang-linker-wrapper, which runs `clang --target=nvptx64-nvidia-cuda` for each
// arch, whose clang-nvlink-wrapper runs nvlink from the toolkit it is given. The launcher gives it
// a toolkit folder of kcache's own (shadow_toolkit: the real toolkit's files, with kcache as
// nvlink), so each arch's nvlink reaches kcache, which sends it to the daemon as an nvlink step
// (launch_nvlink). Everything else of the link (the images' extraction, fatbinary, the wrapper's
// registration code, the host link) runs as clang runs it: the program is clang's, byte for byte.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "endpoint.hpp"
#include "kcache/process.hpp"
#include "kcache/sha256.hpp"
#include "kcache/step.hpp"
#include "launcher/clang_plan.hpp"
#include "launcher/direct_key.hpp"
#include "launcher/launch.hpp"
#include "launcher/launcher.hpp"
#include "launcher/nvcc_plan.hpp"

namespace kcache::launcher {
namespace {

namespace fs = std::filesystem;

// The folder holding this kcache's front (`kcache`, beside kcache-grpc), which the shadow's
// nvlink names.
fs::path kcache_front() {
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const fs::path front = self.parent_path() / "kcache";
  return fs::exists(front, ec) ? front : self;
}

// Whether `shadow` is a whole shadow of `root` for this kcache: its nvlink is kcache, its ptxas
// the root's.
bool shadow_holds(const fs::path& shadow, const fs::path& root, const fs::path& front) {
  std::error_code ec;
  return fs::read_symlink(shadow / "bin" / "nvlink", ec) == front && !ec &&
         fs::read_symlink(shadow / "bin" / "ptxas", ec) == root / "bin" / "ptxas" && !ec;
}

// A toolkit folder of the launcher's state standing for the toolkit at `root`: a link to each of
// its entries but bin, and a bin of links to its programs but nvlink, which is kcache. Made once
// per toolkit (and kcache), whole or not at all: built aside, then renamed into place. Empty where
// it cannot be made.
fs::path shadow_toolkit(const fs::path& root) {
  std::error_code ec;
  const fs::path real = fs::canonical(root, ec);
  const fs::path front = kcache_front();
  const fs::path state = state_dir();
  if (ec || front.empty() || state.empty() || !fs::is_regular_file(real / "bin" / "nvlink", ec)) return {};
  const fs::path shadow = state / "toolkits" / to_hex(sha256(real.string() + '\0' + front.string())).substr(0, 16);
  if (shadow_holds(shadow, real, front)) return shadow;
  const fs::path aside = shadow.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(aside, ec);
  fs::create_directories(aside / "bin", ec);
  if (ec) return {};
  for (const auto& entry : fs::directory_iterator(real, ec)) {
    if (entry.path().filename() != "bin") fs::create_symlink(entry.path(), aside / entry.path().filename(), ec);
    if (ec) break;
  }
  for (const auto& entry : fs::directory_iterator(real / "bin", ec)) {
    if (ec) break;
    const fs::path name = entry.path().filename();
    fs::create_symlink(name == "nvlink" ? front : entry.path(), aside / "bin" / name, ec);
  }
  if (ec) {
    fs::remove_all(aside, ec);
    return {};
  }
  fs::remove_all(shadow, ec);  // one of another kcache or a broken one
  fs::rename(aside, shadow, ec);
  if (ec) fs::remove_all(aside, ec);  // another launch's, renamed first, stands
  return shadow_holds(shadow, real, front) ? shadow : fs::path();
}

// The toolkit clang-linker-wrapper is given (--cuda-path=) in clang's plan of the link, else the
// one clang finds itself (as `-v` says: "Found CUDA installation: DIR, version ..."), or "".
std::string linked_toolkit(const std::string& clang, const std::vector<std::string>& args) {
  std::vector<std::string> dry = {clang, "-v", "-###"};
  dry.insert(dry.end(), args.begin(), args.end());
  ProcessOptions options;
  options.output = ProcessOptions::Output::separate;
  options.search_path = true;
  auto ran = run_process(dry, options);
  if (!ran || ran->exit_code != 0) return {};
  const std::string& text = ran->error_output;
  std::string found;
  for (std::size_t begin = 0; begin < text.size();) {
    std::size_t end = std::min(text.find('\n', begin), text.size());
    std::string_view line(text.data() + begin, end - begin);
    begin = end + 1;
    constexpr std::string_view k_found = "Found CUDA installation: ";
    if (line.starts_with(k_found)) found = line.substr(k_found.size(), line.find(", version") - k_found.size());
    if (!line.starts_with(" \"")) continue;
    auto words = shell_words(line, {});
    if (!words || words->empty() || basename_of(words->front()) != "clang-linker-wrapper") continue;
    for (const std::string& w : *words) {
      if (w.starts_with("--cuda-path=")) return w.substr(12);
    }
  }
  return found;
}

// One nvlink of clang's device link (plan_clang_nvlink), on the daemon: the cubins it links by
// their digests first, sent only on a miss; the image staged where clang-nvlink-wrapper reads it.
class NvlinkLaunch : public Launch {
 public:
  using Launch::Launch;

  std::optional<std::string> read_option_files() override { return std::nullopt; }
  Invocation invocation() const override { return {{}, {m_args}, true}; }
  std::unique_ptr<Launch> for_source(std::vector<std::string> args) const override {
    return std::make_unique<NvlinkLaunch>(m_compiler, std::move(args));
  }
  bool answered_before_plan() override { return false; }

  std::optional<std::string> plan() override {
    std::vector<std::string> argv = {m_compiler};
    argv.insert(argv.end(), m_args.begin(), m_args.end());
    m_step = plan_clang_nvlink(argv, work());
    if (!m_step.refusal.empty()) return m_step.refusal;
    // nvlink's identity names the toolkit's libcudadevrt.a, as the daemon's does.
    const fs::path root = fs::path(m_compiler).parent_path().parent_path();
    std::vector<std::string> folders;
    for (std::string_view lib : k_toolkit_library_folders) folders.push_back((root / lib).string());
    m_cudadevrt = find_archive(folders, "cudadevrt", [](const std::string& p) {
      std::error_code ec;
      return fs::is_regular_file(p, ec);
    });
    if (m_cudadevrt.empty()) return "no libcudadevrt.a beside nvlink (clang)";
    return std::nullopt;
  }

  std::vector<Task> tasks() override {
    Task link;
    link.run = [this](Printed& out) {
      for (const auto& [from, to] : m_step.inputs) {
        std::error_code ec;
        fs::create_symlink(fs::absolute(from, ec), to, ec);
        if (ec) return false;
      }
      stage(work() + "image.cubin", m_step.output);
      return device_step(out, StepTool::nvlink, m_step.argv, device_identity(StepTool::nvlink, m_compiler, m_cudadevrt));
    };
    return {std::move(link)};
  }

 private:
  ClangNvlink m_step;
  std::string m_cudadevrt;
};

}  // namespace

void launch_clang_link(const std::string& clang, std::vector<std::string> args) {
  LocalStats stats;
  const std::string toolkit = linked_toolkit(clang, args);
  const fs::path shadow = toolkit.empty() ? fs::path() : shadow_toolkit(toolkit);
  if (shadow.empty()) {
    stats.add(toolkit.empty() ? "uncacheable.clang link without a toolkit" : "uncacheable.clang link: no toolkit folder of its own");
  } else {
    stats.add("launcher.clang_device_links");
    // The device link's clang (and its clang-nvlink-wrapper) take this toolkit: the last
    // --cuda-path wins.
    args.insert(args.end(), {"-Xoffload-linker", "--cuda-path=" + shadow.string()});
  }
  stats.write();
  args.insert(args.begin(), clang);
  exec_compiler(args);
}

int launch_nvlink(const std::string& nvlink, const std::vector<std::string>& args) { return NvlinkLaunch(nvlink, args).run(); }

std::string real_nvlink(const std::string& invoked_as) {
  // In a shadow toolkit, the nvlink beside the ptxas its bin folder links to.
  std::error_code ec;
  const fs::path ptxas = fs::read_symlink(fs::path(invoked_as).parent_path() / "ptxas", ec);
  if (!ec) {
    const fs::path nvlink = ptxas.parent_path() / "nvlink";
    if (fs::is_regular_file(nvlink, ec)) return nvlink.string();
  }
  return next_on_path("nvlink");
}

}  // namespace kcache::launcher
