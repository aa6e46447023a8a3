// The one rule for undefined symbols in device modules (server/compile/device_symbols.hpp), each
// legal case and the refusals; rtlib's C++ ABI functions; which names are device-only; jobs that
// link several modules; and errors too long for a status message.
#include <gtest/gtest.h>

#include <regex>

#include "compile/compiler.hpp"
#include "compile/device_symbols.hpp"
#include "compile_support.hpp"
#include "kcache/rtlib.hpp"
#include "test_support.hpp"

namespace kcache::server {
namespace {

bool has_cuda() { return test::default_compiler().toolchain().cuda_present; }

// A device job of several modules (the first's format, then each linked one's), for `images`.
Expected<CompileOutput> compile_modules(const std::vector<std::pair<InputFormat, std::string>>& modules,
                                        std::vector<ImageRequest> images) {
  JobSpec spec;
  spec.format = modules.at(0).first;
  std::vector<std::string_view> bytes;
  for (std::size_t i = 0; i < modules.size(); ++i) {
    if (i > 0) spec.linked_formats.push_back(modules[i].first);
    bytes.push_back(modules[i].second);
  }
  if (auto ok = canonicalize(spec, test::default_compiler().toolchain().host_triple); !ok) return ok.error();
  return test::default_compiler().compile(CompileJob{spec, bytes, std::move(images)});
}

Expected<CompileOutput> compile_ir(const std::string& ir, std::vector<ImageRequest> images) {
  return compile_modules({{InputFormat::llvm_text, ir}}, std::move(images));
}

// PTX for sm_80, plus a cubin where the toolkit is present: the rule holds only if ptxas (or
// nvJitLink) agrees that what is left undefined is supplied.
std::vector<ImageRequest> ptx_and_cubin() {
  std::vector<ImageRequest> images = {{"sm_80", ImageKind::ptx}};
  if (has_cuda()) images.push_back({"sm_80", ImageKind::cubin});
  return images;
}

constexpr const char* k_header = R"(
target datalayout = "e-i64:64-i128:128-v16:16-v32:32-n16:32:64"
target triple = "nvptx64-nvidia-cuda"
)";

std::string module(const std::string& body) { return std::string(k_header) + body; }

struct Legal {
  const char* what;
  std::string ir;
  const char* in_ptx;  // what the PTX must say about it
};

TEST(UndefinedSymbols, WhatTheDriverOrLinkerSuppliesCompiles) {
  const std::vector<Legal> cases = {
      {"dynamic shared memory, float",
       module(R"(@smem = external addrspace(3) global [0 x float], align 4
define ptx_kernel void @k(ptr %out) {
  %v = load float, ptr addrspace(3) @smem
  store float %v, ptr %out
  ret void
})"),
       ".extern .shared .align 4 .b8 smem[]"},
      {"dynamic shared memory, 16-byte aligned float4, and a second extern array in the same kernel",
       module(R"(@tiles = external addrspace(3) global [0 x <4 x float>], align 16
@counts = external addrspace(3) global [0 x i32], align 4
define ptx_kernel void @k(ptr %out) {
  %v = load <4 x float>, ptr addrspace(3) @tiles
  %c = load i32, ptr addrspace(3) @counts
  %e = extractelement <4 x float> %v, i32 0
  %f = sitofp i32 %c to float
  %s = fadd float %e, %f
  store float %s, ptr %out
  ret void
})"),
       ".extern .shared .align 16 .b8 tiles[]"},
      {"dynamic shared memory in two template instantiations (one extern, as clang emits it)",
       module(R"(@_ZZ6reduceIfEvPT_E4smem = external addrspace(3) global [0 x i8], align 8
define ptx_kernel void @_Z6reduceIfEvPT_(ptr %out) {
  %v = load float, ptr addrspace(3) @_ZZ6reduceIfEvPT_E4smem
  store float %v, ptr %out
  ret void
}
define ptx_kernel void @_Z6reduceIdEvPT_(ptr %out) {
  %v = load double, ptr addrspace(3) @_ZZ6reduceIfEvPT_E4smem
  store double %v, ptr %out
  ret void
})"),
       ".extern .shared .align 8 .b8 _ZZ6reduceIfEvPT_E4smem[]"},
      {"the driver's printf, malloc, free and assert",
       module(R"(@fmt = private unnamed_addr addrspace(1) constant [4 x i8] c"%d\0A\00"
@file = private unnamed_addr addrspace(1) constant [5 x i8] c"k.cu\00"
declare i32 @vprintf(ptr, ptr)
declare ptr @malloc(i64)
declare void @free(ptr)
declare void @__assertfail(ptr, ptr, i32, ptr, i64)
define ptx_kernel void @k(i32 %n) {
  %p = call ptr @malloc(i64 16)
  %ok = icmp ne ptr %p, null
  br i1 %ok, label %use, label %fail
use:
  store i32 %n, ptr %p
  %f = addrspacecast ptr addrspace(1) @fmt to ptr
  %r = call i32 @vprintf(ptr %f, ptr %p)
  call void @free(ptr %p)
  ret void
fail:
  %g = addrspacecast ptr addrspace(1) @file to ptr
  call void @__assertfail(ptr %g, ptr %g, i32 1, ptr %g, i64 1)
  ret void
})"),
       ".extern .func  (.param .b32 func_retval0) vprintf"},
      {"libdevice (linked in) and rtlib (linked in)",
       module(R"(declare float @__nv_expf(float)
declare ptr @gpu_malloc(i64)
define ptx_kernel void @k(ptr %out, float %x) {
  %y = call float @__nv_expf(float %x)
  %p = call ptr @gpu_malloc(i64 4)
  store float %y, ptr %p
  store float %y, ptr %out
  ret void
})"),
       ".entry k("},
      {"a texture reference, bound by the driver",
       module(R"(@tex = external addrspace(1) global i64, align 8
define ptx_kernel void @k(ptr %out) {
  %h = load i64, ptr addrspace(1) @tex
  store i64 %h, ptr %out
  ret void
}
!nvvm.annotations = !{!0}
!0 = !{ptr addrspace(1) @tex, !"texture", i32 1})"),
       "tex"},
  };
  for (const Legal& c : cases) {
    std::vector<ImageRequest> images = ptx_and_cubin();
    if (std::string(c.what).starts_with("libdevice") && test::default_compiler().toolchain().libdevice.empty()) {
      images = {{"sm_80", ImageKind::ptx}};
      continue;  // without the toolkit there is no libdevice to link: FAILED_PRECONDITION, tested elsewhere
    }
    if (std::string(c.what).starts_with("a texture reference")) images = {{"sm_80", ImageKind::ptx}};
    auto out = compile_ir(c.ir, images);
    ASSERT_TRUE(out) << c.what << ": " << out.error().message;
    EXPECT_NE(out->images[0].data.find(c.in_ptx), std::string::npos) << c.what << ":\n" << out->images[0].data;
    if (out->images.size() > 1) {
      EXPECT_EQ(out->images[1].data.substr(0, 4), "\x7f" "ELF") << c.what;
    }
  }
}

TEST(UndefinedSymbols, DynamicParallelismIsLeftToTheDeviceRuntime) {
  // What clang-22 emits for `child<<<1, 32>>>(p)` in device code (with -fgpu-rdc).
  std::string ir = module(R"(%struct.dim3 = type { i32, i32, i32 }
declare ptr @__cudaCDP2GetParameterBuffer(i64, i64)
declare i32 @__cudaCDP2LaunchDevice(ptr, ptr, ptr byval(%struct.dim3) align 4, ptr byval(%struct.dim3) align 4, i32, ptr)
define ptx_kernel void @child(ptr %p) {
  store i32 1, ptr %p
  ret void
}
define ptx_kernel void @parent(ptr %p) {
  %grid = alloca %struct.dim3, align 4
  %block = alloca %struct.dim3, align 4
  store %struct.dim3 { i32 1, i32 1, i32 1 }, ptr %grid
  store %struct.dim3 { i32 32, i32 1, i32 1 }, ptr %block
  %b = call ptr @__cudaCDP2GetParameterBuffer(i64 64, i64 8)
  store ptr %p, ptr %b
  %r = call i32 @__cudaCDP2LaunchDevice(ptr @child, ptr %b, ptr byval(%struct.dim3) align 4 %grid, ptr byval(%struct.dim3) align 4 %block, i32 0, ptr null)
  ret void
})");
  auto out = compile_ir(ir, ptx_and_cubin());
  ASSERT_TRUE(out) << out.error().message;
  EXPECT_NE(out->images[0].data.find(".extern .func  (.param .b32 func_retval0) __cudaCDP2LaunchDevice"), std::string::npos)
      << out->images[0].data;
  EXPECT_TRUE(ptx_uses_device_runtime(out->images[0].data));
  if (out->images.size() > 1) {
    EXPECT_EQ(out->images[1].data.substr(0, 4), "\x7f" "ELF") << "libcudadevrt linked";
  }
}

TEST(UndefinedSymbols, AnythingElseNamesTheSymbolAndItsUsers) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"a function", module(R"(declare void @missing_helper(ptr)
define ptx_kernel void @k(ptr %p) {
  call void @missing_helper(ptr %p)
  ret void
})")},
      {"a global variable outside shared memory",
       module(R"(@table = external addrspace(1) global [16 x float]
define ptx_kernel void @k(ptr %out) {
  %v = load float, ptr addrspace(1) @table
  store float %v, ptr %out
  ret void
})")},
      {"a constant-memory variable", module(R"(@coeffs = external addrspace(4) global [8 x float]
define ptx_kernel void @k(ptr %out) {
  %v = load float, ptr addrspace(4) @coeffs
  store float %v, ptr %out
  ret void
})")},
      {"a libdevice-looking name libdevice does not have", module(R"(declare float @__nv_no_such_function(float)
define ptx_kernel void @k(ptr %out, float %x) {
  %y = call float @__nv_no_such_function(float %x)
  store float %y, ptr %out
  ret void
})")},
  };
  for (const auto& [what, ir] : cases) {
    auto out = compile_ir(ir, {{"sm_80", ImageKind::ptx}});
    if (what.starts_with("a libdevice") && test::default_compiler().toolchain().libdevice.empty()) continue;
    ASSERT_FALSE(out) << what;
    EXPECT_EQ(out.error().code, ErrorCode::k_invalid_argument) << what;
    EXPECT_NE(out.error().message.find("1 undefined symbol remains"), std::string::npos) << what << ": " << out.error().message;
    ASSERT_EQ(out.error().details.size(), 1u) << what;
    EXPECT_NE(out.error().details[0].find("used by function 'k'"), std::string::npos) << out.error().details[0];
  }
}

TEST(UndefinedSymbols, AThousandSymbolsGiveAShortMessageAndTheWholeReport) {
  std::string ir = k_header;
  for (int s = 0; s < 1000; ++s) ir += "declare void @undefined_" + std::to_string(s) + "()\n";
  for (int k = 0; k < 8; ++k) {
    ir += "define ptx_kernel void @kernel_with_a_long_name_" + std::to_string(k) + "() {\n";
    for (int s = 0; s < 1000; ++s) ir += "  call void @undefined_" + std::to_string(s) + "()\n";
    ir += "  ret void\n}\n";
  }
  auto out = compile_ir(ir, {{"sm_80", ImageKind::ptx}});
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::k_invalid_argument);
  EXPECT_LT(out.error().message.size(), 1024u) << out.error().message;
  EXPECT_NE(out.error().message.find("1000 undefined symbols remain"), std::string::npos);
  EXPECT_TRUE(std::regex_search(out.error().message, std::regex(" and [0-9]+ more"))) << out.error().message;
  ASSERT_EQ(out.error().details.size(), 1000u);
  for (const std::string& line : out.error().details) {
    EXPECT_NE(line.find("function 'kernel_with_a_long_name_7'"), std::string::npos) << line;
  }
}

TEST(RtlibCxxAbi, VirtualFunctionsLinkPureVirtualThatReportsItself) {
  // A vtable with a pure virtual slot, as clang emits for an abstract device class.
  std::string ir = module(R"(@vtable = internal addrspace(1) constant [2 x ptr] [ptr @__cxa_pure_virtual, ptr @__cxa_deleted_virtual]
declare void @__cxa_pure_virtual()
declare void @__cxa_deleted_virtual()
define ptx_kernel void @k(i32 %i) {
  %slot = getelementptr [2 x ptr], ptr addrspace(1) @vtable, i32 0, i32 %i
  %fn = load ptr, ptr addrspace(1) %slot
  call void %fn()
  ret void
})");
  auto out = compile_ir(ir, ptx_and_cubin());
  ASSERT_TRUE(out) << out.error().message;
  const std::string& ptx = out->images[0].data;
  EXPECT_EQ(ptx.find(".extern .func __cxa_pure_virtual"), std::string::npos) << "rtlib defines it";
  EXPECT_EQ(ptx.find(".visible .func __cxa_pure_virtual"), std::string::npos) << "internalized, like all of rtlib";
  EXPECT_NE(ptx.find("__cxa_pure_virtual"), std::string::npos);
  EXPECT_NE(ptx.find("kcache_exception_info"), std::string::npos) << "it reports a device exception";
  EXPECT_NE(ptx.find("trap"), std::string::npos);
}

// The names the host guard and the store refuse: the ROCm device libraries (ocml math, ockl kernel
// library, oclc control constants) by prefix, and nothing the host has its own of.
TEST(DeviceOnlySymbols, RocmDeviceLibraryNamesAreDeviceOnly) {
  for (const char* name : {"__ocml_sin_f32", "__ocml_exp_f32", "__ockl_get_local_id", "__ockl_printf_begin",
                           "__oclc_ISA_version", "__oclc_finite_only_opt", "gpu_malloc", "llvm.amdgcn.workitem.id.x"}) {
    EXPECT_TRUE(rtlib::is_device_only_symbol(name)) << name;
  }
  for (const char* name : {"sinf", "__ocml", "ocml_sin_f32", "__ocl_sin", "__ocklx", "__cxa_pure_virtual", "hipMalloc",
                           "llvm.memcpy.p0.p0.i64"}) {
    EXPECT_FALSE(rtlib::is_device_only_symbol(name)) << name;
  }
}

// Relocatable device code: a kernel in one module, what it calls in others.
const std::string k_kernel_module = module(R"(declare float @scale(float)
@bias = external addrspace(1) global float
define ptx_kernel void @apply(ptr %data) {
  %x = load float, ptr %data
  %y = call float @scale(float %x)
  %b = load float, ptr addrspace(1) @bias
  %z = fadd float %y, %b
  store float %z, ptr %data
  ret void
})");
const std::string k_scale_module = module(R"(define float @scale(float %x) {
  %y = fmul float %x, 2.0
  ret float %y
})");
const std::string k_bias_module = module(R"(@bias = addrspace(1) global float 1.0)");

TEST(LinkedModules, IrModulesLinkIntoOneImagePerArch) {
  auto out = compile_modules({{InputFormat::llvm_text, k_kernel_module},
                              {InputFormat::llvm_bitcode, test::to_bitcode(k_scale_module)},
                              {InputFormat::llvm_text, k_bias_module}},
                             {{"sm_80", ImageKind::ptx}, {"sm_90", ImageKind::ptx}});
  ASSERT_TRUE(out) << out.error().message;
  for (const Image& image : out->images) {
    EXPECT_NE(image.data.find(".visible .entry apply("), std::string::npos);
    EXPECT_NE(image.data.find(".visible .global .align 4 .f32 bias"), std::string::npos) << image.data;
    EXPECT_EQ(image.data.find(".extern"), std::string::npos) << "everything resolved:\n" << image.data;
    EXPECT_EQ(image.data.find(".visible .func"), std::string::npos) << "helpers are internal";
  }
  auto missing = compile_modules({{InputFormat::llvm_text, k_kernel_module}, {InputFormat::llvm_text, k_bias_module}},
                                 {{"sm_80", ImageKind::ptx}});
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("scale"), std::string::npos) << missing.error().message;
}

TEST(LinkedModules, TwoDefinitionsOfOneSymbolAreRefused) {
  auto out = compile_modules({{InputFormat::llvm_text, k_kernel_module},
                              {InputFormat::llvm_text, k_scale_module},
                              {InputFormat::llvm_text, k_scale_module},
                              {InputFormat::llvm_text, k_bias_module}},
                             {{"sm_80", ImageKind::ptx}});
  ASSERT_FALSE(out);
  EXPECT_EQ(out.error().code, ErrorCode::k_invalid_argument);
  EXPECT_NE(out.error().message.find("linked module 3"), std::string::npos) << out.error().message;
  EXPECT_NE(out.error().message.find("scale"), std::string::npos) << out.error().message;
}

// Helpers as relocatable PTX, as nvcc -rdc or another compiler would hand them over.
constexpr const char* k_helper_ptx = R"(.version 7.0
.target sm_80
.address_size 64
.visible .global .align 4 .f32 bias = 0f3F800000;
.visible .func (.param .b32 func_retval0) scale(.param .b32 scale_param_0)
{
	.reg .f32 %f<3>;
	ld.param.f32 %f1, [scale_param_0];
	add.f32 %f2, %f1, %f1;
	st.param.f32 [func_retval0], %f2;
	ret;
}
)";

constexpr const char* k_kernel_ptx = R"(.version 7.0
.target sm_80
.address_size 64
.extern .func (.param .b32 func_retval0) scale(.param .b32 scale_param_0);
.extern .global .align 4 .f32 bias;
.visible .entry apply(.param .u64 apply_param_0)
{
	.reg .f32 %f<4>;
	.reg .b64 %rd<3>;
	ld.param.u64 %rd1, [apply_param_0];
	cvta.to.global.u64 %rd2, %rd1;
	ld.global.f32 %f1, [%rd2];
	{
	.param .b32 param0;
	st.param.f32 [param0], %f1;
	.param .b32 retval0;
	call.uni (retval0), scale, (param0);
	ld.param.f32 %f2, [retval0];
	}
	ld.global.f32 %f3, [bias];
	add.f32 %f2, %f2, %f3;
	st.global.f32 [%rd2], %f2;
	ret;
}
)";

TEST(LinkedModules, PtxModulesLinkWithIrOrPtxIntoACubin) {
  auto refused = compile_modules({{InputFormat::llvm_text, k_kernel_module}, {InputFormat::ptx, k_helper_ptx}},
                                 {{"sm_80", ImageKind::ptx}});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::k_invalid_argument);
  EXPECT_NE(refused.error().message.find("cubin only"), std::string::npos) << refused.error().message;
  if (!has_cuda()) GTEST_SKIP() << "no CUDA toolkit (nvJitLink, nvlink) at /usr/local/cuda to link PTX";

  for (const auto& first : std::vector<std::pair<InputFormat, std::string>>{
           {InputFormat::llvm_text, k_kernel_module}, {InputFormat::ptx, k_kernel_ptx}}) {
    auto out = compile_modules({first, {InputFormat::ptx, k_helper_ptx}}, {{"sm_80", ImageKind::cubin}, {"sm_90", ImageKind::cubin}});
    ASSERT_TRUE(out) << out.error().message;
    for (const Image& image : out->images) {
      EXPECT_EQ(image.data.substr(0, 4), "\x7f" "ELF");
      ASSERT_EQ(image.meta.kernels.size(), 1u);
      EXPECT_EQ(image.meta.kernels[0].name, "apply");
    }
  }
  // nvJitLink formats its own unresolved-symbol error with a stack buffer out of scope, which
  // AddressSanitizer reports inside libnvJitLink.so (not kcache code).
  if (test::k_asan_build) return;
  auto unresolved = compile_modules({{InputFormat::ptx, k_kernel_ptx}}, {{"sm_80", ImageKind::cubin}});
  ASSERT_FALSE(unresolved) << "scale and bias are defined nowhere";
  EXPECT_EQ(unresolved.error().code, ErrorCode::k_invalid_argument) << unresolved.error().message;
}

TEST(PtxSymbols, DefinitionsAndExternsAreRead) {
  std::string ptx = R"(
.version 8.0
.target sm_80
.address_size 64
.extern .func  (.param .b32 func_retval0) vprintf
(
	.param .b64 vprintf_param_0
);
.extern .func (.param .b64 func_retval0) cudaGetParameterBufferV2(.param .b64 a);
.extern .shared .align 16 .b8 smem[];
.visible .global .align 4 .u32 counter;
.visible .global .align 8 .b8 table[32] = {0};
.weak .func helper(.param .b32 x)
.visible .entry kernel(
)";
  PtxSymbols s = ptx_symbols(ptx);
  EXPECT_EQ(s.external, (std::set<std::string>{"vprintf", "cudaGetParameterBufferV2"}));
  EXPECT_EQ(s.defined, (std::set<std::string>{"counter", "table", "helper", "kernel"}));
  EXPECT_TRUE(ptx_uses_device_runtime(ptx));
  EXPECT_FALSE(ptx_uses_device_runtime(".extern .func (.param .b32 func_retval0) vprintf(.param .b64 a);"));
}

}  // namespace
}  // namespace kcache::server

namespace kcache::server {
namespace {

// The runtime library's digest is in every key's toolchain fingerprint: the bitcode must not
// carry the folder the project was built in (clang writes the source's path into it), or two
// checkouts of one commit would never share a cache entry.
TEST(RuntimeLibrary, ItsBitcodeNamesNoFolderOfTheBuild) {
  const std::string folder = KCACHE_SOURCE_DIR;
  ASSERT_FALSE(folder.empty());
  for (std::string_view bitcode : {rtlib::device_bitcode(), rtlib::amdgcn_bitcode()}) {
    ASSERT_FALSE(bitcode.empty());
    EXPECT_EQ(bitcode.find(folder), std::string_view::npos) << "the bitcode names " << folder;
  }
}

}  // namespace
}  // namespace kcache::server
