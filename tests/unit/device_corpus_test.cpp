// The test kernel corpus through the whole device pipeline: rtlib linked only where used and
// internalized, libdevice linked for __nv_*, PTX and cubin for sm_80 and sm_90, IR from clang's
// CUDA frontend, and every link-time error explained.
#include <gtest/gtest.h>

#include <regex>
#include <set>

#include "compile/compiler.hpp"
#include "compile_support.hpp"
#include "test_support.hpp"

namespace kcache::server {
namespace {


Expected<CompileOutput> compile_module(const std::string& module, std::vector<ImageRequest> images,
                                InputFormat format = InputFormat::llvm_text, const Compiler& with = test::default_compiler()) {
  return test::compile_device_job(module, std::move(images), {}, format, with);
}

std::set<std::string> entries(const std::string& ptx) {
  static const std::regex entry(R"(\.entry\s+([A-Za-z_$][A-Za-z0-9_$]*))");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), entry); it != std::sregex_iterator(); ++it) {
    out.insert((*it)[1]);
  }
  return out;
}

// Functions the PTX declares with `directive` (visible, extern, weak) .func.
std::set<std::string> functions(const std::string& ptx, const std::string& directive) {
  std::regex declared("\\." + directive + R"(\s+\.func\s+(\([^)]*\)\s*)?([A-Za-z_$][A-Za-z0-9_$]*))");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), declared); it != std::sregex_iterator(); ++it) {
    out.insert((*it)[2]);
  }
  return out;
}

struct Kernel {
  const char* file;
  std::set<std::string> entries;
  bool uses_rtlib;
  bool uses_libdevice;
};

const std::vector<Kernel> k_corpus = {
    {"kernels/saxpy.ll", {"saxpy"}, false, false},
    {"kernels/reduce_shared.ll", {"block_sum"}, false, false},
    {"kernels/throw.ll", {"checked_store"}, true, false},
    {"kernels/alloc.ll", {"scratch"}, true, false},
    {"kernels/expf.ll", {"exp_all"}, false, true},
};

TEST(DeviceCorpus, PtxHasExactlyTheKernelsAndNoVisibleRuntimeFunction) {
  for (const Kernel& k : k_corpus) {
    auto out = compile_module(test::read_test_data(k.file), {{"sm_80", ImageKind::ptx}, {"sm_90", ImageKind::ptx}});
    ASSERT_TRUE(out) << k.file << ": " << out.error().message;
    for (const Image& image : out->images) {
      const std::string& ptx = image.data;
      EXPECT_EQ(entries(ptx), k.entries) << k.file;
      EXPECT_EQ(functions(ptx, "visible"), std::set<std::string>{}) << k.file << ": only kernels are exported";
      EXPECT_EQ(functions(ptx, "weak"), std::set<std::string>{}) << k.file;
      for (const std::string& name : functions(ptx, "extern")) {
        EXPECT_TRUE(name == "vprintf" || name == "malloc" || name == "free") << k.file << " leaves " << name << " undefined";
      }
      EXPECT_EQ(ptx.find("__nv_expf"), std::string::npos) << k.file << ": libdevice is linked and inlined";
      EXPECT_EQ(ptx.find("kcache_exception_info") != std::string::npos, k.file == std::string("kernels/throw.ll"))
          << k.file << ": the exception record is linked exactly when an exception can be reported";
      if (k.uses_rtlib) {  // linked in, as internal (not .visible, not .extern) functions or inlined
        EXPECT_NE(ptx.find(k.file == std::string("kernels/alloc.ll") ? "malloc" : "vprintf"), std::string::npos) << k.file;
      }
    }
  }
}

TEST(DeviceCorpus, CubinsAreCudaElfsForTheirArch) {
  if (!test::default_compiler().toolchain().cuda_present) GTEST_SKIP() << "no CUDA toolkit (ptxas) at /usr/local/cuda";
  for (const Kernel& k : k_corpus) {
    auto out = compile_module(test::read_test_data(k.file), {{"sm_80", ImageKind::cubin}, {"sm_90", ImageKind::cubin}});
    ASSERT_TRUE(out) << k.file << ": " << out.error().message;
    for (const Image& image : out->images) {
      const std::string& elf = image.data;
      ASSERT_GT(elf.size(), 64u);
      EXPECT_EQ(elf.substr(0, 4), "\x7f" "ELF");
      auto u16 = [&](std::size_t at) { return static_cast<unsigned>(static_cast<unsigned char>(elf[at])) |
                                              static_cast<unsigned>(static_cast<unsigned char>(elf[at + 1])) << 8; };
      EXPECT_EQ(u16(18), 190u) << "EM_CUDA";
      unsigned flags = u16(48) | u16(50) << 16;
      EXPECT_EQ((flags >> 8) & 0xff, static_cast<unsigned>(parse_sm_arch(image.meta.arch)->number()))
          << k.file << " " << image.meta.arch;
      std::set<std::string> names;
      for (const KernelInfo& info : image.meta.kernels) names.insert(info.name);
      EXPECT_EQ(names, k.entries);
    }
  }
}

TEST(DeviceCorpus, CompilesAreDeterministic) {
  std::vector<ImageRequest> images = {{"sm_90", ImageKind::ptx}};
  if (test::default_compiler().toolchain().cuda_present) images.push_back({"sm_90", ImageKind::cubin});
  for (const Kernel& k : k_corpus) {
    auto a = compile_module(test::read_test_data(k.file), images);
    auto b = compile_module(test::read_test_data(k.file), images);
    ASSERT_TRUE(a && b) << k.file;
    for (std::size_t i = 0; i < images.size(); ++i) EXPECT_EQ(a->images[i].data, b->images[i].data) << k.file;
  }
}

TEST(DeviceCorpus, IrFromClangsCudaFrontendCompiles) {
  if (!test::default_compiler().toolchain().cuda_present) GTEST_SKIP() << "no CUDA toolkit for clang's CUDA headers";
  test::TempDir dir;
  test::write_file(dir.path() / "k.cu",
                   "#include <cuda_runtime.h>\n"
                   "__device__ float scale(float x) { return expf(x) * 2.0f; }\n"
                   "__global__ void kernel(float *out, const float *in, int n) {\n"
                   "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                   "  if (i < n) out[i] = scale(in[i]);\n}\n");
  // With clang's own libdevice, and without it (-nocudalib: __nv_expf is left for kcache to link).
  for (std::vector<std::string> extra : {std::vector<std::string>{}, std::vector<std::string>{"-nocudalib"}}) {
    std::vector<std::string> argv = {KCACHE_CLANG_PATH, "-x", "cuda", "--cuda-device-only", "--cuda-gpu-arch=sm_80",
                                     "--cuda-path=/usr/local/cuda", "-Wno-unknown-cuda-version",
                                     "-I/usr/local/cuda/include/cccl", "-O2", "-emit-llvm", "-c",
                                     (dir.path() / "k.cu").string(), "-o", (dir.path() / "k.bc").string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto clang = test::run_program(argv);
    ASSERT_EQ(clang.exit_code, 0) << clang.err;
    auto out = compile_module(test::read_file(dir.path() / "k.bc"), {{"sm_90", ImageKind::ptx}, {"sm_90", ImageKind::cubin}},
                       InputFormat::llvm_bitcode);
    ASSERT_TRUE(out) << out.error().message;
    EXPECT_EQ(entries(out->images[0].data), (std::set<std::string>{"_Z6kernelPfPKfi"}));
    EXPECT_EQ(out->images[0].data.find("__nv_expf"), std::string::npos);
    EXPECT_NE(out->images[0].data.find(".target sm_90"), std::string::npos);
  }
}

TEST(DeviceCorpus, RuntimeSignatureMismatchNamesTheFunctionTheExpectationAndTheCaller) {
  auto out = compile_module("target triple = \"nvptx64-nvidia-cuda\"\ndeclare void @gpu_malloc(i64)\n"
                     "define ptx_kernel void @k() {\n  call void @gpu_malloc(i64 8)\n  ret void\n}\n",
                     {{"sm_90", ImageKind::ptx}});
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::k_invalid_argument);
  EXPECT_NE(out.error().message.find(
                "runtime function 'gpu_malloc' is declared as 'void (i64)', but rtlib defines it as 'ptr (i64)'"),
            std::string::npos)
      << out.error().message;
  EXPECT_NE(out.error().message.find("used by function 'k'"), std::string::npos) << out.error().message;
}

TEST(DeviceCorpus, LinkErrorsAreExplained) {
  struct Case {
    const char* name;
    std::string module, expect;
  };
  const std::string head = "target triple = \"nvptx64-nvidia-cuda\"\n";
  std::vector<Case> cases = {
      {"unknown gpu_ name", head + "declare void @gpu_teleport()\ndefine ptx_kernel void @k() {\n  call void @gpu_teleport()\n  ret void\n}\n",
       "'gpu_teleport' (used by function 'k') uses the reserved gpu_ prefix but is not an rtlib function"},
      {"defines a runtime function", head + "define void @gpu_free(ptr %p) {\n  ret void\n}\n",
       "the module defines 'gpu_free', which rtlib provides"},
      {"undefined helper", head + "declare void @helper(i32)\ndefine ptx_kernel void @k() {\n  call void @helper(i32 1)\n  ret void\n}\n",
       "1 undefined symbol remains after linking rtlib and libdevice: helper."},
  };
  for (const Case& c : cases) {
    auto out = compile_module(c.module, {{"sm_90", ImageKind::ptx}});
    ASSERT_FALSE(out) << c.name;
    EXPECT_EQ(out.error().code, ErrorCode::k_invalid_argument) << c.name;
    EXPECT_NE(out.error().message.find(c.expect), std::string::npos) << c.name << ": " << out.error().message;
  }
}

TEST(DeviceCorpus, MissingLibdeviceIsAFailedPrecondition) {
  static const Compiler without_toolkit(detect_toolchain("/nonexistent/cuda"));
  auto out = compile_module(test::read_test_data("kernels/expf.ll"), {{"sm_90", ImageKind::ptx}}, InputFormat::llvm_text,
                     without_toolkit);
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::k_failed_precondition);
  EXPECT_NE(out.error().message.find("libdevice is not installed at /nonexistent/cuda/nvvm/libdevice/libdevice.10.bc"),
            std::string::npos)
      << out.error().message;
}

}  // namespace
}  // namespace kcache::server

namespace kcache::server {
namespace {

// Dynamic parallelism: a kernel launching a kernel is linked with the toolkit's libcudadevrt.a,
// by nvJitLink in process or by ptxas --compile-only + nvlink.
TEST(DeviceCorpus, DynamicParallelismLinksTheDeviceRuntime) {
  std::string launch = test::read_test_data("kernels/launch.ll");
  auto ptx = compile_module(launch, {{"sm_90", ImageKind::ptx}});
  ASSERT_TRUE(ptx) << ptx.error().message;
  EXPECT_EQ(entries(ptx->images[0].data), (std::set<std::string>{"_Z5childPi", "_Z6parentPi"}));
  EXPECT_EQ(functions(ptx->images[0].data, "extern"),
            (std::set<std::string>{"__cudaCDP2GetParameterBuffer", "__cudaCDP2LaunchDevice"}));
  if (!test::default_compiler().toolchain().cuda_present || test::default_compiler().toolchain().cudadevrt.empty()) {
    GTEST_SKIP() << "PTX checked; no CUDA toolkit with libcudadevrt.a to link a cubin";
  }
  static const Compiler ptxas(detect_toolchain("/usr/local/cuda", CubinAssembler::ptxas));
  for (const Compiler* c : {&test::default_compiler(), &ptxas}) {
    auto cubin = compile_module(launch, {{"sm_90", ImageKind::cubin}}, InputFormat::llvm_text, *c);
    ASSERT_TRUE(cubin) << assembler_name(c->toolchain()) << ": " << cubin.error().message;
    EXPECT_EQ(cubin->images[0].data.substr(0, 4), "\x7f" "ELF") << assembler_name(c->toolchain());
    std::set<std::string> names;
    for (const KernelInfo& k : cubin->images[0].meta.kernels) names.insert(k.name);
    EXPECT_EQ(names, (std::set<std::string>{"_Z5childPi", "_Z6parentPi"}));
  }
}

}  // namespace
}  // namespace kcache::server
