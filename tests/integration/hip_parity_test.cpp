// Parity on real HIP code: every file of the HIP pattern corpus (tests/data/hip, clang-22 against
// Debian's HIP 5.2.3 headers, one bitcode per arch as HIP builds make them) for gfx90a, gfx942,
// gfx1030 and gfx1100, through the bare toolchain as processes (llvm-link with ROCm's device
// libraries, opt -O2, llc, ld.lld) and through a real kcached. kcache must accept every module the
// bare toolchain accepts, with exactly its kernels; it may accept more (it sets the oclc control
// constants itself, where rocm-device-libs 5.2.3 has no file for gfx942 or gfx11). Then the rule
// for bitcode made for another arch (docs/pipelines.md, "AMD"), on the same corpus.
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "amd_support.hpp"
#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

const std::filesystem::path k_device_libs = "/usr/lib/x86_64-linux-gnu/amdgcn/bitcode";

struct HipFile {
  std::string file, stem;
  std::vector<std::string> archs;  // clang makes bitcode for these
  std::size_t kernels = 0;         // as the bare toolchain lists them
};

// The file list as built (the archs KCACHE_CORPUS_ARCHS picked), or another list of its form.
std::vector<HipFile> read_hip_corpus(const std::filesystem::path& list = KCACHE_HIP_CORPUS_TSV) {
  std::vector<HipFile> out;
  std::ifstream tsv(list);
  std::string line;
  std::getline(tsv, line);  // header
  while (std::getline(tsv, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    HipFile f;
    std::string archs, kernels;
    std::getline(fields, f.file, '\t');
    std::getline(fields, archs, '\t');
    std::getline(fields, kernels, '\t');
    f.stem = f.file.substr(0, f.file.find('.'));
    std::istringstream each(archs);
    for (std::string arch; std::getline(each, arch, ',');) f.archs.push_back(arch);
    f.kernels = std::stoul(kernels);
    out.push_back(std::move(f));
  }
  return out;
}

std::filesystem::path hip_bitcode(const std::string& stem, const std::string& made_for) {
  return std::filesystem::path(KCACHE_HIP_CORPUS_DIR) / (stem + "." + made_for + ".bc");
}

struct AmdOutcome {
  bool accepted = false;
  std::string error;
  std::map<std::string, KernelNote> kernels;
};

// The bare toolchain, as clang's HIP toolchain links (tests/data/hip/README.md): the device
// libraries only as far as used and internalized, with the oclc control files that exist for
// the arch (rocm-device-libs 5.2.3 has no oclc_isa_version for gfx942 or gfx11).
AmdOutcome reference(const std::filesystem::path& bitcode, const std::string& arch, const std::filesystem::path& dir) {
  bool wave64 = !arch.starts_with("gfx1");
  std::string isa = k_device_libs / ("oclc_isa_version_" + arch.substr(3) + ".bc");
  std::vector<std::string> link = {(llvm_tools() / "llvm-link").string(), bitcode.string(), "--only-needed",
                                   "--internalize"};
  for (std::string lib : {"hip.bc", "ocml.bc", "ockl.bc", "oclc_daz_opt_off.bc", "oclc_unsafe_math_off.bc",
                          "oclc_finite_only_off.bc", "oclc_correctly_rounded_sqrt_on.bc", "oclc_abi_version_500.bc",
                          wave64 ? "oclc_wavefrontsize64_on.bc" : "oclc_wavefrontsize64_off.bc"}) {
    link.push_back((k_device_libs / lib).string());
  }
  if (std::filesystem::exists(isa)) link.push_back(isa);
  std::filesystem::path linked = dir / "ref.bc", optimised = dir / "ref.opt.bc", object = dir / "ref.o",
                        hsaco = dir / "ref.hsaco";
  link.insert(link.end(), {"-o", linked.string()});
  std::vector<std::vector<std::string>> steps = {
      link,
      {(llvm_tools() / "opt").string(), "-O2", linked.string(), "-o", optimised.string()},
      {(llvm_tools() / "llc").string(), "-O2", "-mtriple=amdgcn-amd-amdhsa", "-mcpu=" + arch, "-filetype=obj",
       optimised.string(), "-o", object.string()},
      {(llvm_tools() / "ld.lld").string(), "-shared", "--no-undefined", object.string(), "-o", hsaco.string()}};
  for (const auto& argv : steps) {
    CommandResult r = run_program(argv);
    if (r.exit_code != 0) {
      return {false, std::filesystem::path(argv[0]).filename().string() + ": " + r.err.substr(0, 600), {}};
    }
  }
  return {true, {}, code_object_kernels(hsaco)};
}

AmdOutcome through_kcache(Client& client, const std::filesystem::path& bitcode, const std::string& arch,
                       const std::filesystem::path& dir) {
  v1::CompileRequest request = device_request(read_file(bitcode), {arch}, {v1::KIND_HSACO});
  request.set_format(v1::FORMAT_LLVM_BITCODE);
  auto response = client.compile(request);
  if (!response) return {false, std::string(error_code_name(response.error().code)) + ": " + response.error().message, {}};
  std::filesystem::path hsaco = dir / "kcache.hsaco";
  write_file(hsaco, response->images(0).data());
  return {true, {}, code_object_kernels(hsaco)};
}

// The corpus as built keeps every file of tests/data/hip/corpus.tsv, each for archs it lists (their
// bitcode built) and for both wave sizes where it lists both, and every arch the list names is
// built for some file (docs/development.md, "The corpora's archs").
TEST(HipCorpusSample, EveryFileBothWaveSizesAndEveryArchOfTheListAreBuilt) {
  if (std::string(KCACHE_HIP_CORPUS_DIR).empty()) GTEST_SKIP() << "no HIP corpus: " << KCACHE_HIP_CORPUS_SKIP_REASON;
  std::vector<HipFile> listed = read_hip_corpus(std::filesystem::path(KCACHE_TEST_DATA_DIR) / "hip" / "corpus.tsv");
  std::vector<HipFile> built = read_hip_corpus();
  ASSERT_EQ(built.size(), listed.size());
  auto wave32 = [](const std::string& arch) { return arch.rfind("gfx1", 0) == 0 && arch.size() >= 7; };  // gfx10xx, gfx11xx
  auto waves = [&](const std::vector<std::string>& archs) {
    std::set<bool> out;
    for (const std::string& arch : archs) out.insert(wave32(arch));
    return out;
  };
  std::set<std::string> listed_archs, built_archs;
  for (std::size_t i = 0; i < listed.size(); ++i) {
    EXPECT_EQ(built[i].file, listed[i].file);
    EXPECT_EQ(waves(built[i].archs), waves(listed[i].archs)) << listed[i].file << ": a wave size it lists is not built";
    listed_archs.insert(listed[i].archs.begin(), listed[i].archs.end());
    for (const std::string& arch : built[i].archs) {
      built_archs.insert(arch);
      EXPECT_NE(std::find(listed[i].archs.begin(), listed[i].archs.end(), arch), listed[i].archs.end())
          << listed[i].file << " is built for " << arch << ", which it does not list";
      EXPECT_TRUE(std::filesystem::exists(hip_bitcode(built[i].stem, arch))) << built[i].stem << " for " << arch;
    }
  }
  EXPECT_EQ(built_archs, listed_archs) << "an arch of the list is built for no file";
}

class HipParity : public DaemonTest {
 protected:
  void SetUp() override {
    if (std::string(KCACHE_HIP_CORPUS_DIR).empty()) GTEST_SKIP() << "no HIP corpus: " << KCACHE_HIP_CORPUS_SKIP_REASON;
    if (!std::filesystem::exists(k_device_libs / "hip.bc")) GTEST_SKIP() << "no rocm-device-libs in " << k_device_libs;
    DaemonTest::SetUp();
  }
  std::vector<std::string> daemon_args() const override { return {"--workers", "2", "--queue-depth", "64"}; }

  AmdOutcome compile(const std::string& stem, const std::string& made_for, const std::string& arch) {
    return through_kcache(*m_client, hip_bitcode(stem, made_for), arch, m_dir.path());
  }
};

TEST_F(HipParity, KcacheAcceptsEveryModuleTheBareToolchainAcceptsWithExactlyItsKernels) {
  std::vector<HipFile> corpus = read_hip_corpus();
  ASSERT_GE(corpus.size(), 25u);
  struct Job {
    const HipFile* file;
    std::string arch;
    AmdOutcome reference, kcache;
  };
  std::vector<Job> jobs;
  for (const HipFile& f : corpus) {
    for (const std::string& arch : f.archs) jobs.push_back({&f, arch, {}, {}});
  }
  auto make_client = [&] { return std::make_unique<Client>(ClientOptions{m_daemon->address(), std::chrono::seconds(300)}); };
  parallel_for(jobs.size(), 2, make_client, [&](std::unique_ptr<Client>& client, std::size_t i) {
    Job& j = jobs[i];
    TempDir dir;
    std::filesystem::path bitcode = hip_bitcode(j.file->stem, j.arch);
    j.reference = reference(bitcode, j.arch, dir.path());
    j.kcache = through_kcache(*client, bitcode, j.arch, dir.path());
  });

  std::map<std::string, std::pair<int, int>> accepted;  // arch -> (reference, kcache)
  for (const Job& j : jobs) {
    std::string what = j.file->file + " for " + j.arch;
    accepted[j.arch].first += j.reference.accepted ? 1 : 0;
    accepted[j.arch].second += j.kcache.accepted ? 1 : 0;
    if (j.reference.accepted) {
      EXPECT_TRUE(j.kcache.accepted) << what << ": the bare toolchain accepts it, kcache said " << j.kcache.error;
    } else {
      std::printf("  reference refused %s: %.300s\n", what.c_str(), j.reference.error.c_str());
    }
    if (!j.kcache.accepted) continue;
    std::set<std::string> names;
    for (const auto& [name, note] : j.kcache.kernels) {
      names.insert(name);
      // Code made for this arch keeps its wave size: 64 on gfx9, 32 on gfx10 and newer.
      EXPECT_EQ(note.wave, j.arch.starts_with("gfx1") ? 32 : 64) << what << ": " << name;
    }
    EXPECT_EQ(names.size(), j.file->kernels) << what << ": the kernels corpus.tsv lists";
    if (j.reference.accepted) {
      std::set<std::string> reference_names;
      for (const auto& [name, note] : j.reference.kernels) reference_names.insert(name);
      EXPECT_EQ(names, reference_names) << what << ": exactly the bare toolchain's kernels";
    }
  }
  for (const auto& [arch, counts] : accepted) {
    std::printf("HIP parity %-8s: bare toolchain accepted %d, kcache %d\n", arch.c_str(), counts.first, counts.second);
  }
  // Every kernel that synchronises a block needs hip.bc: the files the issue found refused.
  EXPECT_EQ(accepted["gfx90a"].second, accepted["gfx90a"].first);
}

// Bitcode made for one gfx, asked for another: retargeted where the code allows it, refused with
// the reason where the asked arch cannot run it.
TEST_F(HipParity, BitcodeForAnotherGfxIsRetargetedKeepingItsWaveSizeOrRefusedWithTheReason) {
  // Wave64 code (gfx90a: warpSize is 64 in the code) on RDNA, which runs either: wave64 mode.
  AmdOutcome rdna = compile("warp_shuffle", "gfx90a", "gfx1030");
  ASSERT_TRUE(rdna.accepted) << rdna.error;
  ASSERT_FALSE(rdna.kernels.empty());
  for (const auto& [name, note] : rdna.kernels) EXPECT_EQ(note.wave, 64) << name;
  // Wave32 code made for RDNA, retargeted across RDNA generations: still wave32.
  AmdOutcome rdna3 = compile("warp_vote", "gfx1030", "gfx1100");
  ASSERT_TRUE(rdna3.accepted) << rdna3.error;
  for (const auto& [name, note] : rdna3.kernels) EXPECT_EQ(note.wave, 32) << name;
  // Wave32 code on CDNA (waves of 64 only): every shuffle would change meaning.
  AmdOutcome cdna = compile("warp_shuffle", "gfx1030", "gfx90a");
  ASSERT_FALSE(cdna.accepted);
  EXPECT_NE(cdna.error.find("INVALID_ARGUMENT"), std::string::npos) << cdna.error;
  EXPECT_NE(cdna.error.find("waves of 32"), std::string::npos) << cdna.error;
  EXPECT_NE(cdna.error.find("gfx1030"), std::string::npos) << cdna.error << ": names what it was made for";
  // Matrix cores where there are none: the instruction and the arch by name, not LLVM's words.
  for (const char* arch : {"gfx1030", "gfx1100"}) {
    AmdOutcome mfma = compile("mfma_unguarded", "gfx90a", arch);
    ASSERT_FALSE(mfma.accepted) << arch;
    EXPECT_NE(mfma.error.find("INVALID_ARGUMENT"), std::string::npos) << mfma.error;
    EXPECT_NE(mfma.error.find("llvm.amdgcn.mfma."), std::string::npos) << mfma.error;
    EXPECT_NE(mfma.error.find("MFMA"), std::string::npos) << mfma.error;
    EXPECT_NE(mfma.error.find(std::string(arch) + " does not have"), std::string::npos) << mfma.error;
    EXPECT_EQ(mfma.error.find("Cannot select"), std::string::npos) << mfma.error;
  }
  // MFMA code retargeted within CDNA runs: gfx90a's bitcode for gfx942.
  AmdOutcome cdna3 = compile("mfma_unguarded", "gfx90a", "gfx942");
  EXPECT_TRUE(cdna3.accepted) << cdna3.error;
  // WMMA (RDNA 3) on RDNA 2: named as such.
  AmdOutcome wmma = compile("wmma_unguarded", "gfx1100", "gfx1030");
  ASSERT_FALSE(wmma.accepted);
  EXPECT_NE(wmma.error.find("WMMA"), std::string::npos) << wmma.error;
  EXPECT_NE(wmma.error.find("gfx1030 does not have"), std::string::npos) << wmma.error;
  // And the daemon still serves.
  EXPECT_TRUE(compile("atomics_int", "gfx90a", "gfx90a").accepted);
}

// A module that calls hip.bc's fence on a daemon whose device-library folder lacks hip.bc is
// refused by name, with the library and the package; the key records hip.bc's presence.
TEST(HipDeviceLibraries, AModuleNeedingAMissingLibraryIsRefusedNamingItAndItsPackage) {
  if (std::string(KCACHE_HIP_CORPUS_DIR).empty()) GTEST_SKIP() << "no HIP corpus: " << KCACHE_HIP_CORPUS_SKIP_REASON;
  if (!std::filesystem::exists(k_device_libs / "ocml.bc")) GTEST_SKIP() << "no rocm-device-libs in " << k_device_libs;
  TempDir dir;
  std::filesystem::path libs = dir.path() / "bitcode";
  std::filesystem::create_directories(libs);
  for (const char* lib : {"ocml.bc", "ockl.bc"}) std::filesystem::copy_file(k_device_libs / lib, libs / lib);
  auto daemon = DaemonProcess::start(dir.path() / "db", dir.path() / "kcached.log", {"--rocm-device-libs", libs.string()});
  Client client(ClientOptions{daemon->address()});
  v1::CompileRequest request = device_request(read_file(hip_bitcode("block_sync_fences", "gfx90a")),
                                                          {"gfx90a"}, {v1::KIND_HSACO});
  request.set_format(v1::FORMAT_LLVM_BITCODE);
  auto refused = client.compile(request);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::k_failed_precondition) << refused.error().message;
  EXPECT_NE(refused.error().message.find("__atomic_work_item_fence"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("hip.bc"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("rocm-device-libs"), std::string::npos) << refused.error().message;
}

}  // namespace
}  // namespace kcache::test
