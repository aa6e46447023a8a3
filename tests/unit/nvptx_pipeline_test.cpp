// The NVPTX pipeline in process: LLVM IR to PTX per arch, options that change the code, and
// the errors a person can act on.
#include <gtest/gtest.h>

#include <optional>

#include "compile/compiler.hpp"
#include "worker/cpus.hpp"
#include "compile_support.hpp"
#include "test_support.hpp"

namespace kcache::server {
namespace {

using test::compile_device_job;

Expected<CompileOutput> compile(const std::string& module, std::vector<ImageRequest> images,
                                CompileOptions options = {}, InputFormat format = InputFormat::llvm_text) {
  return compile_device_job(module, std::move(images), std::move(options), format);
}

std::string ptx_for(const std::string& module, const std::string& arch, CompileOptions options = {}) {
  auto out = compile(module, {{arch, ImageKind::ptx}}, std::move(options));
  EXPECT_TRUE(out) << out.error().message;
  return out ? out->images.at(0).data : std::string();
}

TEST(NvptxPipeline, EmitsPtxForEachArch) {
  std::string saxpy = test::read_test_data("kernels/saxpy.ll");
  auto out = compile(saxpy, {{"sm_80", ImageKind::ptx}, {"sm_90", ImageKind::ptx}});
  ASSERT_TRUE(out) << out.error().message;
  ASSERT_EQ(out->images.size(), 2u);
  EXPECT_NE(out->images[0].data.find(".target sm_80"), std::string::npos);
  EXPECT_NE(out->images[1].data.find(".target sm_90"), std::string::npos);
  EXPECT_NE(out->images[1].data.find(".visible .entry saxpy("), std::string::npos);
  ASSERT_EQ(out->images[1].meta.kernels.size(), 1u);
  EXPECT_EQ(out->images[1].meta.kernels[0].name, "saxpy");
  EXPECT_EQ(out->images[1].meta.sha256, sha256(out->images[1].data));
}

TEST(NvptxPipeline, IsDeterministic) {
  std::string saxpy = test::read_test_data("kernels/saxpy.ll");
  EXPECT_EQ(ptx_for(saxpy, "sm_90"), ptx_for(saxpy, "sm_90"));
}

TEST(NvptxPipeline, ReadsBitcodeLikeText) {
  std::string saxpy = test::read_test_data("kernels/saxpy.ll");
  auto bc = compile(test::to_bitcode(saxpy), {{"sm_90", ImageKind::ptx}}, {}, InputFormat::llvm_bitcode);
  ASSERT_TRUE(bc) << bc.error().message;
  EXPECT_EQ(bc->images[0].data, ptx_for(saxpy, "sm_90"));
}

TEST(NvptxPipeline, HonoursAnnotatedKernelsAndTheRequestedPtxVersion) {
  std::string ptx = ptx_for(test::read_test_data("kernels/annotated.ll"), "sm_90");
  EXPECT_NE(ptx.find(".entry scale("), std::string::npos);
  // The newest PTX ISA LLVM and ptxas share, but never older than the module's +ptx80.
  int version = std::max(80, test::default_compiler().toolchain().max_ptx_version);
  std::string directive = ".version " + std::to_string(version / 10) + "." + std::to_string(version % 10) + "\n";
  EXPECT_NE(ptx.find(directive), std::string::npos) << directive << ptx.substr(0, 200);
  EXPECT_NE(ptx.find(".target sm_90"), std::string::npos);  // the job's arch, not clang's sm_80
}

// Found by fuzz/module_fuzzer: a +ptx60 request for sm_80 (which needs PTX 7.0) used to stop
// LLVM with a fatal error where no ptxas raised the version. "At least 6.0" is met by 7.0.
TEST(NvptxPipeline, APtxVersionBelowTheArchsMinimumGetsTheMinimum) {
  static const Compiler no_cuda(detect_toolchain("/nonexistent/cuda"));
  ASSERT_EQ(no_cuda.toolchain().max_ptx_version, 0);
  std::string module = test::read_test_data("kernels/annotated.ll");
  auto at = module.find("+ptx80");
  ASSERT_NE(at, std::string::npos);
  module.replace(at, 6, "+ptx60");
  for (auto [arch, version] : {std::pair{"sm_80", ".version 7.0\n"}, {"sm_90", ".version 7.8\n"}, {"sm_70", ".version 6.0\n"}}) {
    auto out = compile_device_job(module, {{arch, ImageKind::ptx}}, {}, InputFormat::llvm_text, no_cuda);
    ASSERT_TRUE(out) << arch << ": " << out.error().message;
    EXPECT_NE(out->images[0].data.find(version), std::string::npos) << arch << "\n" << out->images[0].data.substr(0, 200);
  }
}

TEST(NvptxPipeline, RequestedEntryPointsBecomeKernels) {
  const std::string module = "target triple = \"nvptx64-nvidia-cuda\"\n"
                             "define void @work(ptr %p) {\n  store i32 1, ptr %p\n  ret void\n}\n";
  EXPECT_EQ(ptx_for(module, "sm_90").find(".entry"), std::string::npos);
  CompileOptions options;
  options.entry_points = {"work"};
  EXPECT_NE(ptx_for(module, "sm_90", options).find(".visible .entry work("), std::string::npos);
}

TEST(NvptxPipeline, OptimisationLevelAndFastMathChangeTheCode) {
  const std::string module = "target triple = \"nvptx64-nvidia-cuda\"\n"
                             "define ptx_kernel void @k(ptr addrspace(1) %p, float %a, float %b) {\n"
                             "  %x = fdiv float %a, %b\n  store float %x, ptr addrspace(1) %p\n  ret void\n}\n";
  CompileOptions o0, o2, fast;
  o0.opt_level = 0;
  fast.fast_math = true;
  std::string p0 = ptx_for(module, "sm_90", o0), p2 = ptx_for(module, "sm_90", o2), pf = ptx_for(module, "sm_90", fast);
  EXPECT_NE(p0, p2);
  EXPECT_NE(pf, p2);
  EXPECT_NE(pf.find("div.approx"), std::string::npos) << pf;
  EXPECT_NE(p2.find("div.rn"), std::string::npos) << p2;
}

TEST(NvptxPipeline, ExplainsEachBadInput) {
  struct Case {
    std::string name, module, expect;
    InputFormat format = InputFormat::llvm_text;
    std::vector<std::string> entries = {};
  };
  std::vector<Case> cases = {
      {"empty", "", "empty"},
      {"random bytes as bitcode", "\x01\x02garbage", "not LLVM bitcode", InputFormat::llvm_bitcode},
      {"truncated bitcode", std::string("BC\xC0\xDE\x35\x14\x00\x00", 8), "not valid LLVM bitcode",
       InputFormat::llvm_bitcode},
      {"syntax error", "define void @f() {\n  ret i32 zork\n}\n", "module.ll:2:"},
      {"verifier", "define void @f() {\nentry:\n  br label %b\nb:\n  %x = add i32 %y, 1\n  %y = add i32 %x, 1\n  ret void\n}\n",
       "verifier"},
      {"host triple", "target triple = \"x86_64-pc-linux-gnu\"\ndefine void @f() {\n  ret void\n}\n", "x86_64-pc-linux-gnu"},
      {"missing entry", "define void @f() {\n  ret void\n}\n", "entry point 'g' is not defined", InputFormat::llvm_text, {"g"}},
      {"entry returns a value", "define i32 @f() {\n  ret i32 0\n}\n", "returns a value", InputFormat::llvm_text, {"f"}},
      // Found by fuzz/module_fuzzer: both used to stop LLVM with a fatal error.
      {"unknown intrinsic", "declare i32 @llvm.nvvm.no.such.thing()\ndefine void @k() {\n  %x = call i32 @llvm.nvvm.no.such.thing()\n  ret void\n}\n",
       "undefined symbol remains after linking rtlib and libdevice: llvm.nvvm.no.such.thing", InputFormat::llvm_text, {"k"}},
      {"kernel name outside PTX's identifiers", "define void @\"k\\b0x\"() {\n  ret void\n}\n",
       "must be PTX identifiers", InputFormat::llvm_text, {"k\xb0x"}},
      // Found by fuzz/module_fuzzer: LLVM's annotation upgrade read past the end of this entry
      // and crashed the worker. The others are the rest of what that upgrade takes on trust.
      {"annotation key without a value", "define void @k() {\n  ret void\n}\n!nvvm.annotations = !{!0}\n"
       "!0 = !{ptr @k, !\"kernel\"}\n", "!nvvm.annotations entry 0 is malformed: a key has no value"},
      {"annotation key not a string", "define void @k() {\n  ret void\n}\n!nvvm.annotations = !{!0}\n"
       "!0 = !{ptr @k, i32 1, i32 1}\n", "element 1 is not a key string"},
      {"kernel annotation on a variable", "@g = global i32 0\n!nvvm.annotations = !{!0}\n"
       "!0 = !{ptr @g, !\"kernel\", i32 1}\n", "'kernel' annotates something that is not a function"},
      {"empty annotation", "define void @k() {\n  ret void\n}\n  !nvvm.annotations   = !{!0}\n!0 = !{}\n",
       "it is not a non-empty tuple"},
  };
  for (const Case& c : cases) {
    CompileOptions options;
    options.entry_points = c.entries;
    auto out = compile(c.module, {{"sm_90", ImageKind::ptx}}, options, c.format);
    ASSERT_FALSE(out) << c.name;
    EXPECT_EQ(out.error().code, ErrorCode::k_invalid_argument) << c.name;
    EXPECT_NE(out.error().message.find(c.expect), std::string::npos) << c.name << ": " << out.error().message;
  }
}

TEST(NvptxPipeline, RefusesArchsLlvmDoesNotKnow) {
  auto out = compile(test::read_test_data("kernels/saxpy.ll"), {{"sm_99", ImageKind::ptx}});
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::k_invalid_argument);
  EXPECT_NE(out.error().message.find("unknown arch 'sm_99'"), std::string::npos);
}

TEST(NvptxPipeline, CubinIsAnElfForTheArchWhenTheToolkitIsPresent) {
  if (!test::default_compiler().toolchain().cuda_present) GTEST_SKIP() << "no CUDA toolkit (ptxas) at /usr/local/cuda";
  auto out = compile(test::read_test_data("kernels/saxpy.ll"), {{"sm_90", ImageKind::cubin}});
  ASSERT_TRUE(out) << out.error().message;
  const std::string& cubin = out->images[0].data;
  ASSERT_GT(cubin.size(), 64u);
  EXPECT_EQ(cubin.substr(0, 4), "\x7f" "ELF");
  std::uint16_t machine = static_cast<std::uint8_t>(cubin[18]) | static_cast<std::uint8_t>(cubin[19]) << 8;
  EXPECT_EQ(machine, 190);  // EM_CUDA
  ASSERT_EQ(out->images[0].meta.kernels.size(), 1u);
  EXPECT_GT(out->images[0].meta.kernels[0].registers, 0u);  // from ptxas -v
}

TEST(NvptxPipeline, PtxInputIsAssembledAndBadPtxExplained) {
  if (!test::default_compiler().toolchain().cuda_present) GTEST_SKIP() << "no CUDA toolkit (ptxas) at /usr/local/cuda";
  std::string ptx = ptx_for(test::read_test_data("kernels/saxpy.ll"), "sm_90");
  auto out = compile(ptx, {{"sm_90", ImageKind::cubin}}, {}, InputFormat::ptx);
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_EQ(out->images[0].data.substr(0, 4), "\x7f" "ELF");
  auto bad = compile(".version 8.0\n.target sm_90\n.address_size 64\nnonsense;\n", {{"sm_90", ImageKind::cubin}}, {},
                     InputFormat::ptx);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::k_invalid_argument);
  EXPECT_NE(bad.error().message.find("ptxas"), std::string::npos) << bad.error().message;
  auto ptx_to_ptx = compile(ptx, {{"sm_90", ImageKind::ptx}}, {}, InputFormat::ptx);
  ASSERT_FALSE(ptx_to_ptx);
  EXPECT_NE(ptx_to_ptx.error().message.find("already PTX"), std::string::npos);
}

}  // namespace
}  // namespace kcache::server

namespace kcache::server {
namespace {

TEST(CubinAssemblers, NvJitLinkAndPtxasBothMakeCudaElfsWithResourceUsage) {
  const Compiler& automatic = test::default_compiler();
  if (!automatic.toolchain().cuda_present) GTEST_SKIP() << "no CUDA toolkit (ptxas) at /usr/local/cuda";
  bool has_nvjitlink = std::filesystem::exists("/usr/local/cuda/lib64/libnvJitLink.so");
  EXPECT_EQ(automatic.toolchain().nvjitlink != nullptr, has_nvjitlink) << "auto prefers nvJitLink where present";
  static const Compiler ptxas(detect_toolchain("/usr/local/cuda", CubinAssembler::ptxas));
  EXPECT_EQ(ptxas.toolchain().nvjitlink, nullptr);
  EXPECT_NE(ptxas.toolchain().fingerprint, automatic.toolchain().fingerprint) << "the assembler is in every key";
  std::string saxpy = test::read_test_data("kernels/saxpy.ll");
  for (const Compiler* c : {&automatic, &ptxas}) {
    JobSpec spec;
    ASSERT_TRUE(canonicalize(spec, c->toolchain().host_triple));
    auto out = c->compile(CompileJob{spec, {saxpy}, {{"sm_90", ImageKind::cubin}}});
    ASSERT_TRUE(out) << assembler_name(c->toolchain()) << ": " << out.error().message;
    EXPECT_EQ(out->images[0].data.substr(0, 4), "\x7f" "ELF");
    ASSERT_EQ(out->images[0].meta.kernels.size(), 1u);
    EXPECT_GT(out->images[0].meta.kernels[0].registers, 0u) << assembler_name(c->toolchain());
  }
}

}  // namespace
}  // namespace kcache::server

namespace kcache::server {
namespace {

// A module of `kernels` kernels, each a long chain of dependent floating-point work over values it
// loads: enough functions and code for ptxas to split its work across threads.
std::string many_kernels(int kernels) {
  std::string ir = "target triple = \"nvptx64-nvidia-cuda\"\n"
                   "declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n";
  for (int k = 0; k < kernels; ++k) {
    std::string n = std::to_string(k);
    ir += "define ptx_kernel void @chain" + n + "(ptr addrspace(1) %x, ptr addrspace(1) %y) {\n"
          "  %t = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()\n  %i = sext i32 %t to i64\n";
    for (int v = 0; v < 16; ++v) {
      std::string s = std::to_string(v);
      ir += "  %p" + s + " = getelementptr float, ptr addrspace(1) %x, i64 " + std::to_string(v * 64 + k) + "\n"
            "  %q" + s + " = getelementptr float, ptr addrspace(1) %p" + s + ", i64 %i\n"
            "  %v" + s + " = load float, ptr addrspace(1) %q" + s + "\n";
    }
    std::string acc = "%v0";
    for (int step = 0; step < 96; ++step) {
      std::string a = "%a" + std::to_string(step), m = "%m" + std::to_string(step);
      std::string v = "%v" + std::to_string((step * 7 + k) % 16);
      ir += "  " + m + " = fmul float " + acc + ", " + v + "\n  " + a + " = fadd float " + m + ", " +
            "%v" + std::to_string((step + k) % 16) + "\n";
      acc = a;
    }
    ir += "  %out = getelementptr float, ptr addrspace(1) %y, i64 %i\n  store float " + acc +
          ", ptr addrspace(1) %out\n  ret void\n}\n";
  }
  return ir;
}

// A miss may assemble its cubin on the cores no other job is using: its worker pins itself to the
// CPUs it was lent (CompileJob::cpus) and the assembler's split compile runs on those. The count
// is no part of the key, so the cubin must be the same bytes however many cores made it, with
// either assembler (the assembler writes its options into the cubin: they must not follow the
// load).
TEST(CubinAssemblers, TheCubinIsTheSameHoweverManyCoresAssembleIt) {
  const Compiler& automatic = test::default_compiler();
  if (!automatic.toolchain().cuda_present) GTEST_SKIP() << "no CUDA toolkit (ptxas) at /usr/local/cuda";
  static const Compiler ptxas(detect_toolchain("/usr/local/cuda", CubinAssembler::ptxas));
  const std::vector<unsigned> all = CpuSlots::allowed();
  ASSERT_FALSE(all.empty());
  std::string module = many_kernels(8);
  for (const Compiler* c : {&automatic, &ptxas}) {
    SCOPED_TRACE(assembler_name(c->toolchain()));
    JobSpec spec;
    ASSERT_TRUE(canonicalize(spec, c->toolchain().host_triple));
    std::optional<Image> first;
    for (const std::vector<unsigned>& cpus : {std::vector<unsigned>{all.front()}, all}) {
      ASSERT_TRUE(CpuSlots::pin(cpus, all));
      CompileJob job{spec, {module}, {{"sm_80", ImageKind::cubin}}};
      job.cpus = cpus;
      auto out = c->compile(job);
      ASSERT_TRUE(CpuSlots::pin({}, all));
      ASSERT_TRUE(out) << cpus.size() << " cores: " << out.error().message;
      const Image& image = out->images.at(0);
      ASSERT_EQ(image.meta.kernels.size(), 8u);
      if (!first) {
        first = image;
        continue;
      }
      EXPECT_EQ(image.meta.sha256, first->meta.sha256) << cpus.size() << " cores made other bytes";
      EXPECT_EQ(image.meta.kernels, first->meta.kernels) << cpus.size() << " cores reported other resources";
    }
  }
}

TEST(CpuSlots, LendsEachCpuToOneJobAtATime) {
  CpuSlots slots({0, 1, 2});
  EXPECT_EQ(slots.size(), 3u);
  {
    CpuSlots::Lease two = slots.take(2);
    EXPECT_EQ(two.cpus(), (std::vector<unsigned>{0, 1}));
    CpuSlots::Lease rest = slots.take(4);
    EXPECT_EQ(rest.cpus(), (std::vector<unsigned>{2}));
    EXPECT_TRUE(slots.take(1).cpus().empty()) << "none free: the job is pinned nowhere";
    EXPECT_EQ(slots.free(), 0u);
    CpuSlots::Lease moved = std::move(two);
    EXPECT_EQ(slots.free(), 0u);
  }
  EXPECT_EQ(slots.free(), 3u) << "every lease gives its CPUs back";
}

TEST(CpuSlots, PinningLimitsWhereTheThreadRuns) {
  const std::vector<unsigned> all = CpuSlots::allowed();
  ASSERT_FALSE(all.empty());
  ASSERT_TRUE(CpuSlots::pin({all.back()}, all));
  EXPECT_EQ(CpuSlots::allowed(), (std::vector<unsigned>{all.back()}));
  ASSERT_TRUE(CpuSlots::pin({}, all));
  EXPECT_EQ(CpuSlots::allowed(), all);
}

}  // namespace
}  // namespace kcache::server

namespace kcache::server {
namespace {

// A job's cubins are assembled while LLVM goes on to the next arch, as many at once as the job
// has CPUs: the images, their order and the diagnostics are the same as one at a time.
TEST(CubinAssemblers, ArchsAssembledAtOnceGiveWhatOneAtATimeGives) {
  const Compiler& c = test::default_compiler();
  if (!c.toolchain().cuda_present) GTEST_SKIP() << "no CUDA toolkit (ptxas) at /usr/local/cuda";
  JobSpec spec;
  ASSERT_TRUE(canonicalize(spec, c.toolchain().host_triple));
  std::string module = many_kernels(4);
  std::vector<ImageRequest> images = {{"sm_80", ImageKind::cubin}, {"sm_80", ImageKind::ptx}, {"sm_86", ImageKind::cubin},
                                      {"sm_90", ImageKind::ptx},   {"sm_90", ImageKind::cubin}};
  std::vector<std::vector<std::string>> made;
  for (std::vector<unsigned> cpus : {std::vector<unsigned>{0}, std::vector<unsigned>{0, 1, 2}}) {
    CompileJob job{spec, {module}, images};
    job.cpus = cpus;  // how many assemble at once (the test thread is not pinned)
    auto out = c.compile(job);
    ASSERT_TRUE(out) << out.error().message;
    ASSERT_EQ(out->images.size(), images.size());
    std::vector<std::string> digests;
    for (std::size_t i = 0; i < images.size(); ++i) {
      EXPECT_EQ(out->images[i].meta.id(), images[i]) << "image " << i << " out of order";
      digests.push_back(to_hex(out->images[i].meta.sha256));
    }
    digests.insert(digests.end(), out->diagnostics.begin(), out->diagnostics.end());
    made.push_back(digests);
  }
  EXPECT_EQ(made[0], made[1]);
}

}  // namespace
}  // namespace kcache::server
