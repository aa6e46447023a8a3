// AMD GPUs through a real kcached: HIP kernels compiled by clang-22 (tests/data/amd, built into
// the AMD corpus) and hand-written IR in GPUCompiler's AMDGPU style, to HSA code objects checked
// with LLVM's own tools (llvm-readobj --notes, llvm-objdump -d, llvm-nm), against the reference
// toolchain run as processes (opt, llc, ld.lld), with selection by target ID, and every bad input.
#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "amd_support.hpp"
#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

std::filesystem::path amd_data() { return std::filesystem::path(KCACHE_TEST_DATA_DIR) / "amd"; }

// Every AMD input module: hand-written IR from the source tree, clang's HIP bitcode from the build.
std::vector<std::filesystem::path> amd_modules() {
  std::vector<std::filesystem::path> out;
  for (const auto& dir : {amd_data(), std::filesystem::path(KCACHE_AMD_CORPUS_DIR)}) {
    if (dir.empty() || !std::filesystem::is_directory(dir)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().extension() == ".ll" || entry.path().extension() == ".bc") out.push_back(entry.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The kernels a module defines, by LLVM's own reading of it (llvm-dis for bitcode).
std::set<std::string> defined_kernels(const std::filesystem::path& module) {
  std::string text = module.extension() == ".bc" ? run_program({(llvm_tools() / "llvm-dis").string(), "-o", "-", module.string()}).out
                                                   : read_file(module);
  std::set<std::string> out;
  static const std::regex kernel(R"(define [^@\n]*amdgpu_kernel [^@\n]*@("?)([^"( ]+)\1\()");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kernel); it != std::sregex_iterator(); ++it) {
    out.insert((*it)[2]);
  }
  return out;
}

std::uint16_t elf_machine(const std::string& elf) {
  if (elf.size() < 20 || elf.substr(0, 4) != "\x7f" "ELF") return 0;
  return static_cast<std::uint16_t>(static_cast<unsigned char>(elf[18]) | (static_cast<unsigned char>(elf[19]) << 8));
}
constexpr std::uint16_t k_em_amdgpu = 224;

class Amd : public DaemonTest {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(llvm_tools() / "llvm-readobj")) GTEST_SKIP() << "no llvm-readobj in " << llvm_tools();
    DaemonTest::SetUp();
    auto caps = m_client->capabilities();
    ASSERT_TRUE(caps) << caps.error().message;
    if (caps->lld_version().empty()) GTEST_SKIP() << "this kcached found no ld.lld (install lld-22)";
  }

  // A device job for AMD archs, hsaco unless other kinds are named.
  static v1::CompileRequest amd_request(const std::string& module, const std::vector<std::string>& archs,
                                        std::vector<v1::ImageKind> emit = {v1::KIND_HSACO}) {
    return device_request(module, archs, std::move(emit));
  }

  std::filesystem::path write(const std::string& name, const std::string& bytes) {
    std::filesystem::path path = m_dir.path() / name;
    write_file(path, bytes);
    return path;
  }

  void expect_refused(const v1::CompileRequest& request, ErrorCode code, const std::string& message) {
    auto r = m_client->compile(request);
    ASSERT_FALSE(r) << "accepted: " << message;
    EXPECT_EQ(r.error().code, code) << error_code_name(r.error().code) << ": " << r.error().message;
    EXPECT_NE(r.error().message.find(message), std::string::npos) << r.error().message;
  }
};

TEST_F(Amd, EveryModuleBecomesCodeObjectsThatLlvmReadsAndDisassembles) {
  auto modules = amd_modules();
  ASSERT_GE(modules.size(), 3u) << "tests/data/amd and the AMD corpus hold the inputs";
  const std::vector<std::string> archs = {"gfx90a", "gfx1100", "gfx11-generic"};
  for (const auto& path : modules) {
    SCOPED_TRACE(path.filename().string());
    std::string module = read_file(path);
    std::set<std::string> kernels = defined_kernels(path);
    ASSERT_FALSE(kernels.empty());
    auto first = m_client->compile(amd_request(module, archs, {v1::KIND_HSACO, v1::KIND_AMDGCN}));
    ASSERT_TRUE(first) << first.error().message;
    EXPECT_EQ(first->outcome(), v1::OUTCOME_MISS);
    ASSERT_EQ(first->images_size(), 6);
    for (const v1::Image& image : first->images()) {
      SCOPED_TRACE(image.arch() + "." + std::to_string(image.kind()));
      if (image.kind() == v1::KIND_AMDGCN) {
        EXPECT_NE(image.data().find(".amdgcn_target \"amdgcn-amd-amdhsa--" + image.arch()), std::string::npos);
        for (const std::string& k : kernels) EXPECT_NE(image.data().find(".amdhsa_kernel " + k), std::string::npos) << k;
        continue;
      }
      ASSERT_EQ(image.kind(), v1::KIND_HSACO);
      EXPECT_EQ(elf_machine(image.data()), k_em_amdgpu);
      std::filesystem::path file = write("k.hsaco", image.data());
      auto notes = run_program({(llvm_tools() / "llvm-readobj").string(), "--notes", file.string()});
      ASSERT_EQ(notes.exit_code, 0) << notes.err;
      EXPECT_NE(notes.out.find("amdhsa.kernels"), std::string::npos);
      EXPECT_NE(notes.out.find("amdhsa.target:   amdgcn-amd-amdhsa--" + image.arch()), std::string::npos) << notes.out;
      auto listed = readobj_kernels(notes.out);
      // Every kernel of the module is in the code object, and kcache recorded LLVM's resource counts.
      std::set<std::string> recorded;
      for (const v1::KernelInfo& k : image.kernels()) {
        recorded.insert(k.name());
        ASSERT_TRUE(listed.contains(k.name())) << k.name();
        EXPECT_EQ(k.registers(), listed[k.name()].vgprs) << k.name() << " VGPRs";
        EXPECT_EQ(k.sgprs(), listed[k.name()].sgprs) << k.name() << " SGPRs";
        EXPECT_EQ(k.shared_bytes(), listed[k.name()].lds_bytes) << k.name() << " LDS";
        EXPECT_GT(k.registers(), 0u) << k.name();
        EXPECT_GT(k.sgprs(), 0u) << k.name();
      }
      EXPECT_EQ(recorded, kernels);
      std::string mcpu = image.arch().substr(0, image.arch().find(':'));
      auto disassembly = run_program({(llvm_tools() / "llvm-objdump").string(), "-d", "--mcpu=" + mcpu, file.string()});
      ASSERT_EQ(disassembly.exit_code, 0) << disassembly.err;
      EXPECT_NE(disassembly.out.find("s_endpgm"), std::string::npos);
      for (const std::string& k : kernels) EXPECT_NE(disassembly.out.find("<" + k + ">:"), std::string::npos) << k;
      // Nothing is left for a later link: ocml, ockl and rtlib resolved inside.
      auto undefined = run_program({(llvm_tools() / "llvm-nm").string(), "--undefined-only", file.string()});
      ASSERT_EQ(undefined.exit_code, 0) << undefined.err;
      EXPECT_EQ(undefined.out, "");
    }
    auto again = m_client->compile(amd_request(module, archs, {v1::KIND_HSACO, v1::KIND_AMDGCN}));
    ASSERT_TRUE(again) << again.error().message;
    EXPECT_EQ(again->outcome(), v1::OUTCOME_HIT);
    EXPECT_EQ(again->key(), first->key());
    for (int i = 0; i < first->images_size(); ++i) {
      EXPECT_EQ(again->images(i).sha256(), first->images(i).sha256());
      EXPECT_EQ(again->images(i).kernels_size(), first->images(i).kernels_size());
    }
    // A device job: nothing of it lands in the host family.
    v1::LookupRequest host;
    host.set_side(v1::SIDE_HOST);
    host.add_keys(first->key());
    auto found = m_client->lookup(host);
    ASSERT_TRUE(found) << found.error().message;
    EXPECT_FALSE(found->results(0).found());
  }
}

// The same module through the bare toolchain as processes (opt -O2, llc, ld.lld): the code
// objects list the same kernels with the same resources.
TEST_F(Amd, MatchesTheReferenceToolchainRunAsProcesses) {
  std::filesystem::path source = amd_data() / "reference_saxpy.ll";
  ASSERT_TRUE(std::filesystem::exists(source)) << source;
  auto compiled = m_client->compile(amd_request(read_file(source), {"gfx90a", "gfx1100"}));
  ASSERT_TRUE(compiled) << compiled.error().message;
  for (const v1::Image& image : compiled->images()) {
    SCOPED_TRACE(image.arch());
    std::filesystem::path optimized = m_dir.path() / "opt.bc", object = m_dir.path() / "ref.o",
                          hsaco = m_dir.path() / "ref.hsaco", ours = write("ours.hsaco", image.data());
    auto opt = run_program({(llvm_tools() / "opt").string(), "-O2", "-mtriple=amdgcn-amd-amdhsa", "-mcpu=" + image.arch(),
                            source.string(), "-o", optimized.string()});
    ASSERT_EQ(opt.exit_code, 0) << opt.err;
    auto llc = run_program({(llvm_tools() / "llc").string(), "-O2", "-mtriple=amdgcn-amd-amdhsa", "-mcpu=" + image.arch(),
                            "-filetype=obj", optimized.string(), "-o", object.string()});
    ASSERT_EQ(llc.exit_code, 0) << llc.err;
    auto lld = run_program({(llvm_tools() / "ld.lld").string(), "-shared", "--no-undefined", object.string(), "-o", hsaco.string()});
    ASSERT_EQ(lld.exit_code, 0) << lld.err;
    auto reference = code_object_kernels(hsaco);
    auto kcache = code_object_kernels(ours);
    ASSERT_FALSE(reference.empty());
    EXPECT_EQ(kcache, reference);
    // And the same instructions.
    auto disassemble = [&](const std::filesystem::path& f) {
      std::string text = run_program({(llvm_tools() / "llvm-objdump").string(), "-d", "--no-show-raw-insn",
                                      "--no-leading-addr", "--mcpu=" + image.arch(), f.string()}).out;
      return text.substr(text.find("Disassembly of section .text"));
    };
    EXPECT_EQ(disassemble(ours), disassemble(hsaco));
  }
}

TEST_F(Amd, ImagesAreChosenByTargetIdWithGenericFallback) {
  // A module of its own: its key holds these three code objects alone.
  std::string module = own_module(read_file(amd_data() / "reference_saxpy.ll"));
  auto compiled = m_client->compile(amd_request(module, {"gfx90a", "gfx90a:xnack+", "gfx11-generic"}));
  ASSERT_TRUE(compiled) << compiled.error().message;
  auto fetch = [&](const std::string& arch) {
    v1::FetchRequest f;
    f.set_key(compiled->key());
    f.set_arch(arch);
    return m_client->fetch(f);
  };
  struct Case {
    const char* device;
    const char* served;
  };
  for (const Case& c : {Case{"gfx90a:sramecc+:xnack+", "gfx90a:xnack+"}, Case{"gfx90a:sramecc+:xnack-", "gfx90a"},
                        Case{"gfx90a", "gfx90a"}, Case{"gfx1100", "gfx11-generic"}, Case{"gfx1151", "gfx11-generic"}}) {
    auto got = fetch(c.device);
    ASSERT_TRUE(got) << c.device << ": " << got.error().message;
    EXPECT_EQ(got->image.arch(), c.served) << c.device;
    EXPECT_EQ(got->image.kind(), v1::KIND_HSACO);
    EXPECT_EQ(elf_machine(got->data), k_em_amdgpu);
  }
  auto none = fetch("gfx1030");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::k_not_found);
  EXPECT_NE(none.error().message.find("gfx11-generic"), std::string::npos) << "names what is stored: " << none.error().message;
  auto bad = fetch("gfx1030:xnack+");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::k_invalid_argument);

  // The load-time call, with the device's full target ID: a hit on what is stored.
  auto loaded = m_client->fetch_or_compile(amd_request(module, {}), "gfx90a:sramecc+:xnack+");
  ASSERT_TRUE(loaded) << loaded.error().message;
  EXPECT_EQ(elf_machine(loaded->data), k_em_amdgpu);
}

TEST_F(Amd, BadInputsAreRefusedAndTheDaemonKeepsServing) {
  std::string module = read_file(amd_data() / "reference_saxpy.ll");
  expect_refused(amd_request(module, {"gfx1999"}), ErrorCode::k_invalid_argument, "unknown processor 'gfx1999'");
  expect_refused(amd_request(module, {"gfx1030:xnack+"}), ErrorCode::k_invalid_argument, "gfx1030 has no xnack setting");
  expect_refused(amd_request(module, {"gfx942:sramecc+:sramecc-"}), ErrorCode::k_invalid_argument, "set twice");
  expect_refused(amd_request(module, {"gfx90a", "sm_90"}), ErrorCode::k_invalid_argument, "separate jobs");
  expect_refused(amd_request(module, {"gfx90a"}, {v1::KIND_CUBIN}), ErrorCode::k_invalid_argument, "'cubin' is NVIDIA's");
  // NVPTX IR sent for a gfx arch.
  expect_refused(amd_request(read_test_data("kernels/saxpy.ll"), {"gfx90a"}), ErrorCode::k_invalid_argument,
                 "NVPTX IR compiles for sm archs");
  // A call nothing defines: named with its caller, never left for the loader.
  std::string undefined = R"(target triple = "amdgcn-amd-amdhsa"
declare float @mystery_math(float)
define amdgpu_kernel void @uses_mystery(ptr addrspace(1) %p) {
  %v = load float, ptr addrspace(1) %p
  %r = call float @mystery_math(float %v)
  store float %r, ptr addrspace(1) %p
  ret void
}
)";
  expect_refused(amd_request(undefined, {"gfx90a"}), ErrorCode::k_invalid_argument,
                 "'mystery_math' (used by function 'uses_mystery')");
  // An rtlib call declared with the wrong signature.
  std::string wrong = R"(target triple = "amdgcn-amd-amdhsa"
declare void @gpu_report_exception(i64)
define amdgpu_kernel void @k() {
  call void @gpu_report_exception(i64 1)
  ret void
}
)";
  expect_refused(amd_request(wrong, {"gfx90a"}), ErrorCode::k_invalid_argument, "rtlib defines it as 'void (ptr)'");
  // A feature the target lacks: matrix cores (MFMA) exist on gfx908 and later CDNA parts, not on
  // RDNA's gfx1100. Refused by name before LLVM meets it (LLVM would stop with "Cannot select").
  std::string mfma = R"(target triple = "amdgcn-amd-amdhsa"
define amdgpu_kernel void @mm(ptr addrspace(1) %p) {
  %a = load float, ptr addrspace(1) %p
  %r = call <4 x float> @llvm.amdgcn.mfma.f32.4x4x1f32(float %a, float %a, <4 x float> zeroinitializer, i32 0, i32 0, i32 0)
  store <4 x float> %r, ptr addrspace(1) %p
  ret void
}
declare <4 x float> @llvm.amdgcn.mfma.f32.4x4x1f32(float, float, <4 x float>, i32, i32, i32)
)";
  expect_refused(amd_request(mfma, {"gfx1100"}), ErrorCode::k_invalid_argument,
                 "'llvm.amdgcn.mfma.f32.4x4x1f32' (used by function 'mm') is one of the MFMA matrix-core instructions");
  auto cdna = m_client->compile(amd_request(mfma, {"gfx90a"}));
  ASSERT_TRUE(cdna) << cdna.error().message;
  // Still serving.
  auto ok = m_client->compile(amd_request(module, {"gfx1100"}));
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->images(0).kind(), v1::KIND_HSACO);
}

// A runtime that loads older code objects (ROCm 5, Debian's HIP 5.2) states the newest it takes:
// its code objects are written at that version, under a key of their own.
TEST_F(Amd, AnOlderRuntimeGetsCodeObjectsOfTheVersionItLoads) {
  std::string module = read_file(amd_data() / "reference_saxpy.ll");
  // EI_ABIVERSION of an HSA code object: 2 for version 4, 3 for 5, 4 for 6.
  auto version_of = [](const v1::Image& image) { return static_cast<unsigned char>(image.data().at(8)) + 2; };
  auto current = m_client->compile(amd_request(module, {"gfx90a", "gfx11-generic"}));
  ASSERT_TRUE(current) << current.error().message;
  EXPECT_EQ(version_of(current->images(0)), 5);
  EXPECT_EQ(version_of(current->images(1)), 6) << "generic targets need version 6";

  v1::CompileRequest rocm5 = amd_request(module, {"gfx90a", "gfx1030"});
  rocm5.set_amd_code_object_version(4);
  auto older = m_client->compile(rocm5);
  ASSERT_TRUE(older) << older.error().message;
  EXPECT_NE(older->key(), current->key());
  for (const v1::Image& image : older->images()) {
    EXPECT_EQ(version_of(image), 4) << image.arch();
    std::filesystem::path file = write("v4.hsaco", image.data());
    auto notes = run_program({(llvm_tools() / "llvm-readobj").string(), "--notes", file.string()});
    ASSERT_EQ(notes.exit_code, 0) << notes.err;
    EXPECT_NE(notes.out.find("amdhsa.kernels"), std::string::npos);
    EXPECT_EQ(image.kernels_size(), current->images(0).kernels_size());
  }
  v1::CompileRequest newest = amd_request(module, {"gfx90a", "gfx11-generic"});
  newest.set_amd_code_object_version(6);
  auto same = m_client->compile(newest);
  ASSERT_TRUE(same) << same.error().message;
  EXPECT_EQ(same->key(), current->key()) << "a runtime that loads everything shares the default images";
  EXPECT_EQ(same->outcome(), v1::OUTCOME_HIT);

  v1::CompileRequest generic = amd_request(module, {"gfx11-generic"});
  generic.set_amd_code_object_version(5);
  expect_refused(generic, ErrorCode::k_invalid_argument, "gfx11-generic is a generic target, whose code objects are version 6");
  v1::CompileRequest ancient = amd_request(module, {"gfx90a"});
  ancient.set_amd_code_object_version(3);
  expect_refused(ancient, ErrorCode::k_invalid_argument, "writes code object versions 4 to 6");
  v1::CompileRequest nvidia = device_request(read_test_data("kernels/saxpy.ll"), {"sm_90"});
  nvidia.set_amd_code_object_version(4);
  expect_refused(nvidia, ErrorCode::k_invalid_argument, "only AMD jobs");

  std::filesystem::path out = m_dir.path() / "cli";
  auto cli = run_cli({"compile", (amd_data() / "reference_saxpy.ll").string(), "--arch", "gfx90a", "--amd-code-object", "4",
                      "--out-dir", out.string()},
                     m_daemon->address());
  ASSERT_EQ(cli.exit_code, 0) << cli.err;
  std::string written = read_file(out / "gfx90a.hsaco");
  ASSERT_GT(written.size(), 8u);
  EXPECT_EQ(written[8], 2) << "version 4";
  EXPECT_NE(cli.out.find(older->key()), std::string::npos) << "the CLI computes the same key: " << cli.out;
}

TEST_F(Amd, TheCliWritesOneCodeObjectPerTarget) {
  std::filesystem::path out = m_dir.path() / "out";
  auto r = run_cli({"compile", (amd_data() / "reference_saxpy.ll").string(), "--arch", "gfx90a,gfx942:sramecc+:xnack-,gfx1100",
                    "--emit", "hsaco,amdgcn", "--out-dir", out.string()},
                   m_daemon->address());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* name : {"gfx90a.hsaco", "gfx942:sramecc+:xnack-.hsaco", "gfx1100.hsaco", "gfx1100.s"}) {
    ASSERT_TRUE(std::filesystem::exists(out / name)) << name << "\n" << r.out;
  }
  EXPECT_EQ(elf_machine(read_file(out / "gfx90a.hsaco")), k_em_amdgpu);
  // kcache capabilities names what the daemon has for AMD.
  auto caps = run_cli({"--json", "capabilities"}, m_daemon->address());
  ASSERT_EQ(caps.exit_code, 0) << caps.err;
  auto j = nlohmann::json::parse(caps.out);
  auto archs = j.at("amd_archs").get<std::vector<std::string>>();
  EXPECT_NE(std::find(archs.begin(), archs.end(), "gfx90a"), archs.end());
  EXPECT_NE(std::find(archs.begin(), archs.end(), "gfx11-generic"), archs.end());
  EXPECT_NE(j.at("lld_version").get<std::string>().find("LLD"), std::string::npos) << caps.out;
  auto bad = run_cli({"compile", (amd_data() / "reference_saxpy.ll").string(), "--arch", "gfx1999", "--out-dir", out.string()},
                     m_daemon->address());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("unknown processor 'gfx1999'"), std::string::npos) << bad.err;
}

// Packaging for AMD: a manifest of gfx targets precompiled into a bundle, served with no daemon
// by the same selection rules (the generic code object for a processor the bundle lacks).
TEST_F(Amd, ABundleOfTargetIdsServesTheRightCodeObjectWithoutADaemon) {
  std::filesystem::path src = m_dir.path() / "src";
  std::filesystem::create_directories(src);
  std::filesystem::copy_file(amd_data() / "reference_saxpy.ll", src / "saxpy.ll");
  std::filesystem::copy_file(amd_data() / "julia_vadd.ll", src / "vadd.ll");
  write_file(src / "m.json", R"({"archs": ["gfx90a", "gfx11-generic"],
                                 "modules": [{"path": "saxpy.ll", "emit": ["hsaco"]}, {"path": "vadd.ll"}]})");
  std::filesystem::path bundle = m_dir.path() / "bundle";
  auto made = run_cli({"precompile", (src / "m.json").string(), "--out", bundle.string()}, m_daemon->address());
  ASSERT_EQ(made.exit_code, 0) << made.err;
  auto key = run_cli({"key", (src / "saxpy.ll").string(), "--arch", "gfx90a"}, m_daemon->address());
  ASSERT_EQ(key.exit_code, 0) << key.err;
  std::string k = key.out.substr(0, 64);
  ASSERT_EQ(m_daemon->stop(), 0);  // no daemon from here on
  struct Case {
    const char* device;
    const char* served;
  };
  for (const Case& c : {Case{"gfx90a:sramecc+:xnack-", "gfx90a"}, Case{"gfx1101", "gfx11-generic"}}) {
    std::filesystem::path out = m_dir.path() / (std::string(c.served) + ".got");
    auto got = run_cli({"bundle-fetch", bundle.string(), k, "--arch", c.device, "-o", out.string()}, "");
    ASSERT_EQ(got.exit_code, 0) << c.device << ": " << got.err;
    EXPECT_NE(got.out.find(std::string("  ") + c.served + " "), std::string::npos) << got.out;
    EXPECT_EQ(elf_machine(read_file(out)), k_em_amdgpu);
  }
  auto none = run_cli({"bundle-fetch", bundle.string(), k, "--arch", "gfx1030"}, "");
  EXPECT_NE(none.exit_code, 0);
  EXPECT_NE(none.err.find("runs on gfx1030"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace kcache::test
