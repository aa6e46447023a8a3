// Parity on real CUDA code: every module of the pattern corpus (tests/data/cuda, built by clang
// and nvcc at build time), for every arch it lists, through the bare toolchain as processes
// (llvm-link, opt -O2, llc with the module's own +ptxNN, ptxas, nvlink) and through a real
// kcached. kcache must accept every module the reference accepts (it may accept more, never
// fewer), and each cubin must hold exactly the module's kernels. nvcc's PTX of each module goes
// through `--format ptx` the same way. The time-limit path runs on the corpus's huge kernel.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <set>
#include <sstream>

#include "compile/cubin.hpp"
#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

struct CorpusModule {
  std::string name;
  std::vector<std::string> stems;  // one per source, in order
  std::vector<std::string> archs;
  bool rdc = false;
  bool cdp = false;   // calls the CUDA device runtime: libcudadevrt at link
  bool huge = false;  // the time-limit kernel
};

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> out;
  std::stringstream s(text);
  for (std::string part; std::getline(s, part, by);) out.push_back(part);
  return out;
}

// The module list as built (the archs KCACHE_CORPUS_ARCHS picked), or another list of its form.
std::vector<CorpusModule> read_corpus(const std::filesystem::path& list = KCACHE_CUDA_CORPUS_TSV) {
  std::ifstream tsv(list);
  std::vector<CorpusModule> out;
  std::string line;
  std::getline(tsv, line);  // header
  while (std::getline(tsv, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> f = split(line, '\t');
    if (f.size() < 4) throw std::runtime_error("corpus.tsv: malformed line: " + line);
    CorpusModule m{f[0], {}, split(f[2], ','), false, false, false};
    for (const std::string& source : split(f[1], ',')) m.stems.push_back(source.substr(0, source.rfind('.')));
    for (const std::string& flag : split(f[3], ',')) {
      m.rdc = m.rdc || flag == "rdc";
      m.cdp = m.cdp || flag == "cdp";
      m.huge = m.huge || flag == "huge";
    }
    out.push_back(std::move(m));
  }
  return out;
}

std::filesystem::path corpus_file(const std::string& stem, const std::string& arch, const std::string& ext) {
  return std::filesystem::path(KCACHE_CUDA_CORPUS_DIR) / (stem + "." + arch + ext);
}

std::filesystem::path cuda(const std::string& tool) { return std::filesystem::path(KCACHE_CUDA_ROOT) / tool; }
std::filesystem::path llvm_tool(const std::string& tool) { return std::filesystem::path(KCACHE_LLVM_TOOLS_DIR) / tool; }

// Kernel entry points of a cubin: function symbols marked as CUDA entries (st_other 0x10) in
// the ELF symbol table.
std::set<std::string> cubin_kernels(const std::string& elf) {
  std::set<std::string> out;
  auto read = [&](std::size_t at, auto& value) {
    if (at + sizeof value > elf.size()) throw std::runtime_error("truncated cubin");
    std::memcpy(&value, elf.data() + at, sizeof value);
  };
  std::uint64_t shoff = 0;
  std::uint16_t shentsize = 0, shnum = 0;
  read(0x28, shoff);
  read(0x3a, shentsize);
  read(0x3c, shnum);
  auto section = [&](std::size_t i, std::size_t field_offset, auto& value) { read(shoff + i * shentsize + field_offset, value); };
  for (std::size_t i = 0; i < shnum; ++i) {
    std::uint32_t type = 0, link = 0;
    std::uint64_t offset = 0, size = 0, strtab = 0;
    section(i, 4, type);
    if (type != 2) continue;  // SHT_SYMTAB
    section(i, 0x18, offset);
    section(i, 0x20, size);
    section(i, 0x28, link);
    section(link, 0x18, strtab);
    for (std::uint64_t s = 0; s + 24 <= size; s += 24) {
      std::uint32_t name = 0;
      std::uint8_t info = 0, other = 0;
      read(offset + s, name);
      read(offset + s + 4, info);
      read(offset + s + 5, other);
      if ((info & 0xf) == 2 && (other & 0x10) != 0) out.insert(std::string(elf.c_str() + strtab + name));
    }
  }
  return out;
}

// The cubin's kernels less those libcudadevrt brings along (its static memset/memcpy kernels,
// named __nv_static_..._cuda_device_runtime_...), which nvlink adds for dynamic parallelism.
std::set<std::string> module_kernels(const std::set<std::string>& cubin) {
  std::set<std::string> out;
  for (const std::string& k : cubin) {
    if (!(k.starts_with("__nv_static_") && k.find("cuda_device_runtime") != std::string::npos)) out.insert(k);
  }
  return out;
}

// The kernels a PTX module declares (.entry), read as the daemon reads them.
std::set<std::string> ptx_entries(const std::string& ptx) {
  std::set<std::string> out;
  for (const server::KernelInfo& k : server::ptx_entries(ptx)) out.insert(k.name);
  return out;
}

struct Outcome {
  bool accepted = false;
  std::string error;
  std::set<std::string> kernels;  // from the cubin
  double seconds = 0;
  std::string detail;  // kcache: registers and spills per kernel
};

// Runs the steps in order, stopping at the first failure.
Outcome run_steps(const std::vector<std::vector<std::string>>& steps, const std::filesystem::path& cubin) {
  Outcome o;
  auto start = std::chrono::steady_clock::now();
  for (const auto& argv : steps) {
    CommandResult r = run_program(argv);
    if (r.exit_code != 0) {
      o.error = std::filesystem::path(argv[0]).filename().string() + ": " + r.err.substr(0, 2000) + r.out.substr(0, 500);
      return o;
    }
  }
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  o.kernels = cubin_kernels(read_file(cubin));
  o.accepted = true;
  return o;
}

// ptxas on each PTX file, then nvlink where the module is relocatable or calls the device runtime.
void add_assembly(std::vector<std::vector<std::string>>& steps, const std::vector<std::filesystem::path>& ptx,
                  const CorpusModule& m, const std::string& arch, const std::filesystem::path& dir,
                  const std::filesystem::path& cubin) {
  bool link = m.rdc || m.cdp || ptx.size() > 1;
  std::vector<std::string> nvlink = {cuda("bin/nvlink").string(), "-arch=" + arch};
  for (std::size_t i = 0; i < ptx.size(); ++i) {
    std::filesystem::path object = dir / ("m" + std::to_string(i) + ".o");
    std::vector<std::string> ptxas = {cuda("bin/ptxas").string(), "-arch=" + arch};
    if (link) ptxas.push_back("-c");
    ptxas.insert(ptxas.end(), {ptx[i].string(), "-o", (link ? object : cubin).string()});
    steps.push_back(ptxas);
    nvlink.push_back(object.string());
  }
  if (!link) return;
  if (m.cdp) nvlink.push_back(cuda("lib64/libcudadevrt.a").string());
  nvlink.insert(nvlink.end(), {"-o", cubin.string()});
  steps.push_back(nvlink);
}

// The bare toolchain on clang's bitcode, honouring the module's own +ptxNN (llc reads the PTX
// version per module, not from the function attributes clang sets).
Outcome reference_from_bitcode(const CorpusModule& m, const std::string& arch, const std::filesystem::path& dir) {
  std::filesystem::path linked = dir / "m.bc", optimised = dir / "m.opt.bc", ptx = dir / "m.ptx", cubin = dir / "m.cubin";
  std::vector<std::string> link = {llvm_tool("llvm-link").string(), "-o", linked.string()};
  for (const std::string& stem : m.stems) link.push_back(corpus_file(stem, arch, ".bc").string());
  CommandResult linking = run_program(link);
  if (linking.exit_code != 0) return Outcome{false, "llvm-link: " + linking.err, {}, 0, {}};
  CommandResult text = run_program({llvm_tool("llvm-dis").string(), linked.string(), "-o", "-"});
  int ptx_version = 0;
  static const std::regex feature(R"(\+ptx([0-9]+))");
  for (auto it = std::sregex_iterator(text.out.begin(), text.out.end(), feature); it != std::sregex_iterator(); ++it) {
    ptx_version = std::max(ptx_version, std::stoi((*it)[1]));
  }
  std::vector<std::vector<std::string>> steps = {
      {llvm_tool("opt").string(), "-O2", linked.string(), "-o", optimised.string()},
      {llvm_tool("llc").string(), "-mtriple=nvptx64-nvidia-cuda", "-mcpu=" + arch,
       ptx_version > 0 ? "-mattr=+ptx" + std::to_string(ptx_version) : "-mattr=", optimised.string(), "-o", ptx.string()}};
  add_assembly(steps, {ptx}, m, arch, dir, cubin);
  return run_steps(steps, cubin);
}

Outcome reference_from_nvcc_ptx(const CorpusModule& m, const std::string& arch, const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> ptx;
  for (const std::string& stem : m.stems) ptx.push_back(corpus_file(stem, arch, ".nvcc.ptx"));
  std::vector<std::vector<std::string>> steps;
  std::filesystem::path cubin = dir / "nvcc.cubin";
  add_assembly(steps, ptx, m, arch, dir, cubin);
  return run_steps(steps, cubin);
}

Outcome through_kcache(Client& client, const CorpusModule& m, const std::string& arch, bool nvcc_ptx) {
  v1::CompileRequest request;
  request.set_side(v1::SIDE_DEVICE);
  request.add_archs(arch);
  if (!nvcc_ptx) request.add_emit(v1::KIND_PTX);
  request.add_emit(v1::KIND_CUBIN);
  v1::InputFormat format = nvcc_ptx ? v1::FORMAT_PTX : v1::FORMAT_LLVM_BITCODE;
  for (std::size_t i = 0; i < m.stems.size(); ++i) {
    std::string bytes = read_file(corpus_file(m.stems[i], arch, nvcc_ptx ? ".nvcc.ptx" : ".bc"));
    if (i == 0) {
      request.set_format(format);
      request.set_module(std::move(bytes));
      continue;
    }
    v1::LinkedModule* linked = request.add_linked_modules();
    linked->set_format(format);
    linked->set_module(std::move(bytes));
  }
  Outcome o;
  auto start = std::chrono::steady_clock::now();
  auto response = client.compile(request);
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!response) {
    o.error = std::string(error_code_name(response.error().code)) + ": " + response.error().message;
    return o;
  }
  o.accepted = true;
  for (const v1::Image& image : response->images()) {
    if (image.kind() != v1::KIND_CUBIN) continue;
    o.kernels = cubin_kernels(image.data());
    std::uint32_t max_registers = 0, spills = 0;
    for (const v1::KernelInfo& k : image.kernels()) {
      max_registers = std::max(max_registers, k.registers());
      spills += k.spill_stores() + k.spill_loads();
    }
    o.detail = std::to_string(image.kernels_size()) + " kernels, <= " + std::to_string(max_registers) +
               " registers, " + std::to_string(spills) + " spill bytes";
  }
  if (!nvcc_ptx) {
    for (const v1::Image& image : response->images()) {
      if (image.kind() == v1::KIND_PTX && ptx_entries(image.data()) != module_kernels(o.kernels)) {
        o.error = "the cubin's kernels differ from the PTX's .entry list";
      }
    }
  }
  return o;
}

// The corpus as built keeps every module of tests/data/cuda/corpus.tsv, each for archs it lists
// (their bitcode built), and every arch the list names is built for some module: a sample of
// archs, never of patterns (docs/development.md, "The corpora's archs").
TEST(CorpusSample, EveryModuleAndEveryArchOfTheListIsBuilt) {
  if (std::string(KCACHE_CUDA_CORPUS_DIR).empty()) GTEST_SKIP() << "no CUDA corpus: " << KCACHE_CUDA_CORPUS_SKIP_REASON;
  std::vector<CorpusModule> listed = read_corpus(std::filesystem::path(KCACHE_TEST_DATA_DIR) / "cuda" / "corpus.tsv");
  std::vector<CorpusModule> built = read_corpus();
  ASSERT_EQ(built.size(), listed.size());
  std::set<std::string> listed_archs, built_archs;
  for (std::size_t i = 0; i < listed.size(); ++i) {
    EXPECT_EQ(built[i].name, listed[i].name);
    EXPECT_FALSE(built[i].archs.empty()) << listed[i].name << " is built for no arch";
    listed_archs.insert(listed[i].archs.begin(), listed[i].archs.end());
    for (const std::string& arch : built[i].archs) {
      built_archs.insert(arch);
      EXPECT_NE(std::find(listed[i].archs.begin(), listed[i].archs.end(), arch), listed[i].archs.end())
          << listed[i].name << " is built for " << arch << ", which it does not list";
      for (const std::string& stem : built[i].stems) {
        EXPECT_TRUE(std::filesystem::exists(corpus_file(stem, arch, ".bc"))) << stem << " for " << arch;
      }
    }
  }
  EXPECT_EQ(built_archs, listed_archs) << "an arch of the list is built for no module";
}

// A daemon for the corpus's tests; none starts where this build has no corpus (the test is skipped).
class CorpusDaemonTest : public DaemonTest {
 protected:
  void SetUp() override {
    if (std::string(KCACHE_CUDA_CORPUS_DIR).empty()) GTEST_SKIP() << "no CUDA corpus: " << KCACHE_CUDA_CORPUS_SKIP_REASON;
    DaemonTest::SetUp();
  }
};

class CorpusParity : public CorpusDaemonTest {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--workers", "2", "--queue-depth", "64"}; }
};

TEST_F(CorpusParity, KcacheAcceptsEveryModuleTheBareToolchainAcceptsWithExactlyItsKernels) {
  std::vector<CorpusModule> corpus = read_corpus();
  ASSERT_GE(corpus.size(), 40u);
  struct Job {
    const CorpusModule* module;
    std::string arch;
    bool nvcc;
    Outcome reference, kcache;
  };
  std::vector<Job> jobs;
  for (const CorpusModule& m : corpus) {
    for (const std::string& arch : m.archs) {
      jobs.push_back({&m, arch, false, {}, {}});
      if (!m.huge) jobs.push_back({&m, arch, true, {}, {}});  // no nvcc PTX is built for it (corpus.cmake)
    }
  }
  auto make_client = [&] { return std::make_unique<Client>(ClientOptions{m_daemon->address(), std::chrono::seconds(300)}); };
  parallel_for(jobs.size(), 3, make_client, [&](std::unique_ptr<Client>& client, std::size_t i) {
    Job& j = jobs[i];
    TempDir dir;
    j.reference = j.nvcc ? reference_from_nvcc_ptx(*j.module, j.arch, dir.path())
                         : reference_from_bitcode(*j.module, j.arch, dir.path());
    j.kcache = through_kcache(*client, *j.module, j.arch, j.nvcc);
  });

  std::map<std::string, std::pair<int, int>> accepted;  // input -> (reference, kcache)
  double reference_seconds = 0, kcache_seconds = 0;
  std::printf("%-26s %-7s %-5s %-10s %-10s %s\n", "module", "arch", "input", "reference", "kcache", "kcache cubin");
  for (const Job& j : jobs) {
    std::string input = j.nvcc ? "nvcc" : "clang";
    accepted[input].first += j.reference.accepted ? 1 : 0;
    accepted[input].second += j.kcache.accepted ? 1 : 0;
    reference_seconds += j.reference.seconds;
    kcache_seconds += j.kcache.seconds;
    std::printf("%-26s %-7s %-5s %-10s %-10s %s\n", j.module->name.c_str(), j.arch.c_str(), input.c_str(),
                j.reference.accepted ? "ok" : "refused", j.kcache.accepted ? "ok" : "refused", j.kcache.detail.c_str());
    std::string what = j.module->name + " for " + j.arch + " from " + input;
    if (j.reference.accepted) {
      EXPECT_TRUE(j.kcache.accepted) << what << ": the bare toolchain accepts it, kcache said " << j.kcache.error;
    }
    if (j.reference.accepted && j.kcache.accepted) {
      EXPECT_EQ(j.kcache.kernels, j.reference.kernels) << what << ": the cubin must hold exactly the module's kernels";
      EXPECT_FALSE(j.kcache.kernels.empty()) << what;
    }
    EXPECT_TRUE(j.kcache.error.empty() || !j.kcache.accepted) << what << ": " << j.kcache.error;
    if (!j.reference.accepted) std::printf("  reference refused %s: %.300s\n", what.c_str(), j.reference.error.c_str());
  }
  for (const auto& [input, counts] : accepted) {
    std::printf("corpus parity (%s input): reference accepted %d module-arch jobs, kcache %d\n", input.c_str(),
                counts.first, counts.second);
  }
  std::printf("summed time: reference %.1f s, kcache %.1f s (3 clients, 2 workers)\n", reference_seconds, kcache_seconds);
}

// The corpus's huge unrolled kernel under a job time limit it cannot meet: DEADLINE_EXCEEDED,
// nothing stored, the daemon keeps serving.
class CorpusTimeLimit : public CorpusDaemonTest {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--job-timeout", "1"}; }
};

TEST_F(CorpusTimeLimit, TheHugeKernelPastTheJobTimeLimitIsDeadlineExceeded) {
  std::vector<CorpusModule> corpus = read_corpus();
  auto it = std::find_if(corpus.begin(), corpus.end(), [](const CorpusModule& m) { return m.huge; });
  ASSERT_NE(it, corpus.end()) << "corpus.tsv names no huge module";
  const std::string& arch = it->archs.front();
  v1::CompileRequest request = device_request(read_file(corpus_file(it->stems.front(), arch, ".bc")), {arch},
                                              {v1::KIND_PTX, v1::KIND_CUBIN});
  request.set_format(v1::FORMAT_LLVM_BITCODE);
  request.mutable_options()->set_opt_level(3);
  auto slow = m_client->compile(request);
  ASSERT_FALSE(slow) << "compiled within 1 s: the huge kernel no longer exercises the time limit";
  EXPECT_EQ(slow.error().code, ErrorCode::k_deadline_exceeded) << slow.error().message;
  auto key = m_client->compute_key(request);
  ASSERT_TRUE(key);
  v1::LookupRequest lookup;
  lookup.add_keys(key->hex());
  auto found = m_client->lookup(lookup);
  ASSERT_TRUE(found);
  EXPECT_FALSE(found->results(0).found()) << "nothing is stored for a job that ran out of time";
  auto small = compile_patiently(device_request(read_test_data("kernels/saxpy.ll"), {"sm_80"}));
  EXPECT_TRUE(small) << "the daemon keeps serving: " << small.error().message;
}

}  // namespace
}  // namespace kcache::test
