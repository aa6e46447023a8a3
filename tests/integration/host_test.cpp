// The host pipeline and the host/device wall: host objects that link and run, a guard that
// rejects every way of reaching a device-only symbol or GPU memory, stubs that fail loudly,
// separate caches.
#include <signal.h>

#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

class Host : public DaemonTest {
 protected:
  static v1::CompileRequest host_request(const std::string& module, v1::HostGuard guard = v1::GUARD_REJECT) {
    v1::CompileRequest r;
    r.set_side(v1::SIDE_HOST);
    r.set_module(module);
    r.mutable_options()->set_guard(guard);
    return r;
  }

  // Links `object` with a C `main` using Debian's cc (PIE by default) and runs the program.
  CommandResult link_and_run(const std::string& object, const std::string& main_c) {
    write_file(m_dir.path() / "m.o", object);
    write_file(m_dir.path() / "main.c", main_c);
    std::filesystem::path program = m_dir.path() / "program";
    auto link = run_program({"/usr/bin/cc", (m_dir.path() / "main.c").string(), (m_dir.path() / "m.o").string(), "-o",
                             program.string()});
    EXPECT_EQ(link.exit_code, 0) << link.err;
    return run_program({program.string()});
  }
};

constexpr const char* k_add = "define i32 @add(i32 %a, i32 %b) {\n  %s = add i32 %a, %b\n  ret i32 %s\n}\n";

TEST_F(Host, ObjectsArePositionIndependentAndLinkIntoARunningProgram) {
  if (!std::filesystem::exists("/usr/bin/cc")) GTEST_SKIP() << "no C compiler at /usr/bin/cc to link with";
  auto r = m_client->compile(host_request(k_add));
  ASSERT_TRUE(r) << r.error().message;
  ASSERT_EQ(r->images_size(), 1);
  EXPECT_EQ(r->images(0).kind(), v1::KIND_OBJECT);
  EXPECT_EQ(r->images(0).arch(), "x86_64");
  EXPECT_EQ(r->images(0).data().substr(0, 4), "\x7f" "ELF");
  auto run = link_and_run(r->images(0).data(),
                          "#include <stdio.h>\nint add(int, int);\nint main(void) { printf(\"%d\\n\", add(40, 2)); }\n");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out, "42\n");

  v1::FetchRequest fetch;
  fetch.set_side(v1::SIDE_HOST);
  fetch.set_key(r->key());
  fetch.set_arch("x86_64");
  auto fetched = m_client->fetch(fetch);
  ASSERT_TRUE(fetched) << fetched.error().message;
  EXPECT_EQ(fetched->data, r->images(0).data());
}

TEST_F(Host, GuardRejectsEveryWayOfReachingADeviceOnlySymbol) {
  struct Case {
    std::string name, module, expect;
  };
  const std::string impl = "define void @impl() {\n  ret void\n}\n";
  std::vector<Case> cases = {
      {"direct call",
       "declare ptr @gpu_malloc(i64)\ndefine ptr @alloc() {\n  %p = call ptr @gpu_malloc(i64 64)\n  ret ptr %p\n}\n",
       "gpu_malloc (rtlib function), used by function 'alloc'"},
      {"invoke",
       "declare void @gpu_signal_exception()\ndeclare i32 @__gxx_personality_v0(...)\n"
       "define void @thrower() personality ptr @__gxx_personality_v0 {\nentry:\n"
       "  invoke void @gpu_signal_exception() to label %ok unwind label %lp\nok:\n  ret void\nlp:\n"
       "  %x = landingpad { ptr, i32 } cleanup\n  resume { ptr, i32 } %x\n}\n",
       "gpu_signal_exception (rtlib function), used by function 'thrower'"},
      {"pointer stored in a global", "declare void @gpu_report_oom(i64)\n@handlers = global [1 x ptr] [ptr @gpu_report_oom]\n",
       "gpu_report_oom (rtlib function), used by global 'handlers'"},
      {"pointer passed as an argument",
       "declare void @gpu_free(ptr)\ndeclare void @register(ptr)\n"
       "define void @setup() {\n  call void @register(ptr @gpu_free)\n  ret void\n}\n",
       "gpu_free (rtlib function), used by function 'setup'"},
      {"constant expression in an initializer",
       "declare void @gpu_report_exception(ptr)\n@addr = global i64 ptrtoint (ptr @gpu_report_exception to i64)\n",
       "gpu_report_exception (rtlib function), used by global 'addr'"},
      {"alias with a device-only name", impl + "@gpu_custom = alias void (), ptr @impl\n",
       "gpu_custom (reserved gpu_ name), declared but unused"},
      {"alias of a device-only function", "define void @gpu_local() {\n  ret void\n}\n@host_name = alias void (), ptr @gpu_local\n",
       "gpu_local (reserved gpu_ name), used by alias 'host_name'"},
      {"ifunc", impl + "define ptr @resolve() {\n  ret ptr @impl\n}\n@gpu_dispatch = ifunc void (), ptr @resolve\n",
       "gpu_dispatch (reserved gpu_ name)"},
      {"declaration without uses", "declare void @gpu_report_exception_name(ptr)\n",
       "gpu_report_exception_name (rtlib function), declared but unused"},
      {"llvm.used", "declare void @gpu_free(ptr)\n@llvm.used = appending global [1 x ptr] [ptr @gpu_free], section \"llvm.metadata\"\n",
       "gpu_free (rtlib function), used by llvm.used"},
      {"llvm.compiler.used",
       "declare void @gpu_free(ptr)\n@llvm.compiler.used = appending global [1 x ptr] [ptr @gpu_free], section \"llvm.metadata\"\n",
       "gpu_free (rtlib function), used by llvm.compiler.used"},
      {"NVVM intrinsic",
       "declare void @llvm.nvvm.membar.sys()\ndefine void @sync() {\n  call void @llvm.nvvm.membar.sys()\n  ret void\n}\n",
       "llvm.nvvm.membar.sys (NVVM intrinsic), used by function 'sync'"},
      {"AMDGPU intrinsic",
       "declare i32 @llvm.amdgcn.workitem.id.x()\ndefine i32 @lane() {\n  %i = call i32 @llvm.amdgcn.workitem.id.x()\n  ret i32 %i\n}\n",
       "llvm.amdgcn.workitem.id.x (AMDGPU intrinsic), used by function 'lane'"},
      {"GPU address space", "@tile = addrspace(3) global i32 0\n", "tile (variable in GPU address space 3)"},
      {"ROCm math library call",
       "declare float @__ocml_sin_f32(float)\n"
       "define float @sine(float %x) {\n  %y = call float @__ocml_sin_f32(float %x)\n  ret float %y\n}\n",
       "__ocml_sin_f32 (ROCm device library function), used by function 'sine'"},
      {"ROCm kernel library pointer in a table",
       "declare i64 @__ockl_get_local_id(i32)\n@id_table = global [1 x ptr] [ptr @__ockl_get_local_id]\n",
       "__ockl_get_local_id (ROCm device library function), used by global 'id_table'"},
      {"alias of a ROCm control constant",
       "@__oclc_finite_only_opt = constant i8 0\n@finite_only = alias i8, ptr @__oclc_finite_only_opt\n",
       "__oclc_finite_only_opt (ROCm device library control constant), used by alias 'finite_only'"},
      {"alias in constant memory",
       "@__oclc_ISA_version = addrspace(4) constant i32 9000\n@isa = alias i32, ptr addrspace(4) @__oclc_ISA_version\n",
       "isa (alias in GPU address space 4)"},
      {"AMDGPU buffer fat pointer variable", "@fat = addrspace(7) global i32 0\n", "fat (variable in GPU address space 7)"},
      {"alias of a GPU variable", "@tile = addrspace(3) global i32 0\n@tile_alias = alias i32, ptr addrspace(3) @tile\n",
       "tile (variable in GPU address space 3), used by alias 'tile_alias'"},
      {"GPU variable's generic address in an initializer",
       "@tile = addrspace(3) global i32 0\n@generic = global ptr addrspacecast (ptr addrspace(3) @tile to ptr)\n",
       "tile (variable in GPU address space 3), used by global 'generic'"},
      {"GPU variable's generic address held in a global",
       "@tile = addrspace(3) global i32 0\n@generic = global ptr addrspacecast (ptr addrspace(3) @tile to ptr)\n",
       "generic (variable holding a pointer into GPU address space 3)"},
      {"device pointer held in a global", "@dev_ptr = global ptr addrspace(1) null\n",
       "dev_ptr (variable holding a pointer into GPU address space 1)"},
      {"GPU pointer parameter",
       "define float @load_global(ptr addrspace(1) %p) {\n  %v = load float, ptr addrspace(1) %p\n  ret float %v\n}\n",
       "load_global (function using pointers into GPU address space 1)"},
      {"addrspacecast to private memory",
       "define void @scratch(ptr %p) {\n  %q = addrspacecast ptr %p to ptr addrspace(5)\n"
       "  store i32 0, ptr addrspace(5) %q\n  ret void\n}\n",
       "scratch (function using pointers into GPU address space 5)"},
      {"store through a constant expression into shared memory",
       "define void @poke() {\n  store i32 1, ptr addrspacecast (ptr addrspace(3) inttoptr (i64 16 to ptr addrspace(3)) to ptr)\n"
       "  ret void\n}\n",
       "poke (function using pointers into GPU address space 3)"},
      {"declaration with a GPU pointer parameter",
       "declare void @launch(ptr addrspace(1))\ndefine void @go() {\n  call void @launch(ptr addrspace(1) null)\n  ret void\n}\n",
       "launch (function using pointers into GPU address space 1), used by function 'go'"},
      {"memcpy into global memory",
       "declare void @llvm.memcpy.p1.p0.i64(ptr addrspace(1), ptr, i64, i1)\n"
       "define void @upload(ptr %src) {\n"
       "  call void @llvm.memcpy.p1.p0.i64(ptr addrspace(1) inttoptr (i64 4096 to ptr addrspace(1)), ptr %src, i64 8, i1 false)\n"
       "  ret void\n}\n",
       "llvm.memcpy.p1.p0.i64 (function using pointers into GPU address space 1), used by function 'upload'"},
      {"function in a GPU address space", "define void @kernel() addrspace(1) {\n  ret void\n}\n",
       "kernel (function in GPU address space 1)"},
  };
  for (const Case& c : cases) {
    auto r = m_client->compile(host_request(c.module));
    ASSERT_FALSE(r) << c.name << " was compiled";
    EXPECT_EQ(r.error().code, ErrorCode::k_invalid_argument) << c.name << ": " << r.error().message;
    EXPECT_NE(r.error().message.find(c.expect), std::string::npos) << c.name << ": " << r.error().message;
    EXPECT_NE(r.error().message.find("nothing was compiled"), std::string::npos) << c.name;
  }
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->entries(), 0u);
  EXPECT_EQ(stats->errors(), cases.size());
}

constexpr const char* k_mixed =
    "declare ptr @gpu_malloc(i64)\n"
    "declare void @llvm.nvvm.membar.sys()\n"
    "define i32 @add(i32 %a, i32 %b) {\n  %s = add i32 %a, %b\n  ret i32 %s\n}\n"
    "define ptr @alloc_device() {\n  %p = call ptr @gpu_malloc(i64 64)\n  ret ptr %p\n}\n"
    "define void @sync() {\n  call void @llvm.nvvm.membar.sys()\n  ret void\n}\n";

TEST_F(Host, StubPolicyReplacesDeviceOnlyCodeWithStubsThatFailLoudly) {
  if (!std::filesystem::exists("/usr/bin/cc")) GTEST_SKIP() << "no C compiler at /usr/bin/cc to link with";
  auto r = m_client->compile(host_request(k_mixed, v1::GUARD_STUB));
  ASSERT_TRUE(r) << r.error().message;
  const v1::Image& image = r->images(0);
  std::vector<std::string> stubbed(image.stubbed().begin(), image.stubbed().end());
  EXPECT_EQ(stubbed, (std::vector<std::string>{"gpu_malloc", "sync (uses llvm.nvvm.membar.sys)"}));
  EXPECT_FALSE(r->diagnostics().empty());

  // The CPU versions fail loudly: the default hook prints the name and aborts.
  auto aborted = link_and_run(image.data(),
                              "#include <stdio.h>\nint add(int, int);\nvoid *alloc_device(void);\n"
                              "int main(void) { printf(\"%d\\n\", add(1, 2)); fflush(stdout); alloc_device(); return 0; }\n");
  EXPECT_EQ(aborted.out, "3\n");
  EXPECT_EQ(aborted.exit_code, 128 + SIGABRT);
  EXPECT_NE(aborted.err.find("device-only function gpu_malloc called on the host"), std::string::npos) << aborted.err;

  // A program can install its own hook (to throw, as CUDA.jl's CPU versions do).
  auto hooked = link_and_run(image.data(),
                             "#include <stdio.h>\n#include <stdlib.h>\nvoid sync(void);\n"
                             "void kcache_device_only_called(const char *name) { printf(\"hook: %s\\n\", name); exit(3); }\n"
                             "int main(void) { sync(); return 0; }\n");
  EXPECT_EQ(hooked.exit_code, 3);
  EXPECT_EQ(hooked.out, "hook: sync\n");

  // A hit returns the same object and the same stub list.
  auto again = m_client->compile(host_request(k_mixed, v1::GUARD_STUB));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->outcome(), v1::OUTCOME_HIT);
  EXPECT_EQ(again->images(0).stubbed_size(), 2);
  EXPECT_EQ(again->images(0).data(), image.data());
}

// Every NVPTX and AMDGPU address space is GPU memory, by a variable in it or a function touching
// it; x86's own address spaces (segment registers, mixed-size pointers) are host code.
TEST_F(Host, GuardKnowsEveryGpuAddressSpaceAndLeavesX86Ones) {
  for (unsigned as : {1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u, 9u, 101u}) {
    std::string space = "addrspace(" + std::to_string(as) + ")";
    auto r = m_client->compile(host_request("@v = " + space + " global i32 0\ndefine void @f(ptr " + space +
                                            " %p) {\n  store i32 1, ptr " + space + " %p\n  ret void\n}\n"));
    ASSERT_FALSE(r) << space << " was compiled";
    EXPECT_EQ(r.error().code, ErrorCode::k_invalid_argument);
    std::string gpu_space = "GPU address space " + std::to_string(as);
    EXPECT_NE(r.error().message.find("v (variable in " + gpu_space + ")"), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find("f (function using pointers into " + gpu_space + ")"), std::string::npos)
        << r.error().message;
  }

  const std::string x86 =
      "@gs_slot = global ptr addrspace(256) null\n"
      "define void @set_gs(ptr addrspace(256) %slot, i64 %v) {\n  store i64 %v, ptr addrspace(256) %slot\n  ret void\n}\n"
      "define i64 @canary() {\n  %c = load i64, ptr addrspace(257) inttoptr (i64 40 to ptr addrspace(257))\n  ret i64 %c\n}\n"
      "define i32 @stack_segment(ptr addrspace(258) %p) {\n  %v = load i32, ptr addrspace(258) %p\n  ret i32 %v\n}\n"
      "define i32 @mixed(ptr addrspace(270) %s, ptr addrspace(271) %u, ptr addrspace(272) %w) {\n"
      "  %a = load i32, ptr addrspace(270) %s\n  %b = load i32, ptr addrspace(271) %u\n  %c = load i32, ptr addrspace(272) %w\n"
      "  %ab = add i32 %a, %b\n  %abc = add i32 %ab, %c\n  ret i32 %abc\n}\n";
  auto legal = m_client->compile(host_request(x86));
  ASSERT_TRUE(legal) << legal.error().message;
  EXPECT_EQ(legal->images(0).stubbed_size(), 0);
}

// ROCm device library calls, a function-pointer table and host functions touching GPU memory
// (AMDGPU private and global, NVPTX-style shared) become stubs; device-only data is refused.
constexpr const char* k_amd_mixed =
    "declare float @__ocml_sin_f32(float)\n"
    "declare i64 @__ockl_get_local_id(i32)\n"
    "declare float @__ocml_sincos_f32(float, ptr addrspace(5))\n"
    "define i32 @add(i32 %a, i32 %b) {\n  %s = add i32 %a, %b\n  ret i32 %s\n}\n"
    "define float @sine(float %x) {\n  %y = call float @__ocml_sin_f32(float %x)\n  ret float %y\n}\n"
    "define float @load_global(ptr addrspace(1) %p) {\n  %v = load float, ptr addrspace(1) %p\n  ret float %v\n}\n"
    "define void @scratch(ptr %p) {\n  %q = addrspacecast ptr %p to ptr addrspace(5)\n"
    "  store i32 0, ptr addrspace(5) %q\n  ret void\n}\n"
    "define float @sincos(float %x) {\n  %c = alloca float\n  %c5 = addrspacecast ptr %c to ptr addrspace(5)\n"
    "  %s = call float @__ocml_sincos_f32(float %x, ptr addrspace(5) %c5)\n  ret float %s\n}\n"
    "define void @poke() {\n  store i32 1, ptr addrspacecast (ptr addrspace(3) inttoptr (i64 16 to ptr addrspace(3)) to ptr)\n"
    "  ret void\n}\n"
    "@id_table = global [1 x ptr] [ptr @__ockl_get_local_id]\n";

TEST_F(Host, StubPolicyStubsRocmLibrariesAndGpuMemoryAndRefusesDeviceData) {
  if (!std::filesystem::exists("/usr/bin/cc")) GTEST_SKIP() << "no C compiler at /usr/bin/cc to link with";
  auto r = m_client->compile(host_request(k_amd_mixed, v1::GUARD_STUB));
  ASSERT_TRUE(r) << r.error().message;
  const v1::Image& image = r->images(0);
  std::vector<std::string> stubbed(image.stubbed().begin(), image.stubbed().end());
  EXPECT_EQ(stubbed, (std::vector<std::string>{"__ocml_sin_f32", "__ockl_get_local_id", "__ocml_sincos_f32",
                                               "load_global (uses GPU address space 1)",
                                               "scratch (uses GPU address space 5)", "sincos (uses GPU address space 5)",
                                               "poke (uses GPU address space 3)"}));

  auto aborted = link_and_run(image.data(),
                              "#include <stdio.h>\nint add(int, int);\nfloat sine(float);\n"
                              "int main(void) { printf(\"%d\\n\", add(1, 2)); fflush(stdout); sine(1.0f); return 0; }\n");
  EXPECT_EQ(aborted.out, "3\n");
  EXPECT_EQ(aborted.exit_code, 128 + SIGABRT);
  EXPECT_NE(aborted.err.find("device-only function __ocml_sin_f32 called on the host"), std::string::npos) << aborted.err;

  const std::string hook =
      "#include <stdio.h>\n#include <stdlib.h>\n"
      "void kcache_device_only_called(const char *name) { printf(\"hook: %s\\n\", name); exit(3); }\n";
  auto through_table = link_and_run(image.data(), hook + "extern long (*const id_table[1])(int);\n"
                                                         "int main(void) { id_table[0](0); return 0; }\n");
  EXPECT_EQ(through_table.exit_code, 3);
  EXPECT_EQ(through_table.out, "hook: __ockl_get_local_id\n");
  auto global_memory = link_and_run(image.data(), hook + "float load_global(float *);\n"
                                                         "int main(void) { load_global(0); return 0; }\n");
  EXPECT_EQ(global_memory.exit_code, 3);
  EXPECT_EQ(global_memory.out, "hook: load_global\n");

  struct Refused {
    std::string module, expect;
  };
  const std::vector<Refused> refused = {
      {"@fat = addrspace(7) global i32 0\ndefine ptr addrspace(7) @fat_address() {\n  ret ptr addrspace(7) @fat\n}\n",
       "'fat' (variable in GPU address space 7) is device-only data"},
      {"@tile = addrspace(3) global i32 0\n", "'tile' (variable in GPU address space 3) is device-only data"},
      {"@__oclc_finite_only_opt = constant i8 0\n@finite_only = alias i8, ptr @__oclc_finite_only_opt\n",
       "'__oclc_finite_only_opt' (ROCm device library control constant) is device-only data"},
      {"@dev_ptr = global ptr addrspace(1) null\n",
       "'dev_ptr' (variable holding a pointer into GPU address space 1) is device-only data"},
      {"define void @kernel() addrspace(1) {\n  ret void\n}\n",
       "'kernel' (function in GPU address space 1) lives in GPU address space 1"},
  };
  for (const Refused& c : refused) {
    auto no = m_client->compile(host_request(c.module, v1::GUARD_STUB));
    ASSERT_FALSE(no) << c.module << " was compiled";
    EXPECT_EQ(no.error().code, ErrorCode::k_invalid_argument);
    EXPECT_NE(no.error().message.find(c.expect), std::string::npos) << no.error().message;
  }
}

TEST_F(Host, HostAndDeviceEntriesNeverMeet) {
  const std::string module = "define void @work(ptr %p) {\n  store i32 1, ptr %p\n  ret void\n}\n";
  auto host = m_client->compile(host_request(module));
  auto device = m_client->compile(device_request(module, {"sm_90"}));
  ASSERT_TRUE(host) << host.error().message;
  ASSERT_TRUE(device) << device.error().message;
  EXPECT_NE(host->key(), device->key());
  for (auto [key, side] : {std::pair{host->key(), v1::SIDE_DEVICE}, std::pair{device->key(), v1::SIDE_HOST}}) {
    v1::LookupRequest lookup;
    lookup.set_side(side);
    lookup.add_keys(key);
    auto found = m_client->lookup(lookup);
    ASSERT_TRUE(found);
    EXPECT_FALSE(found->results(0).found()) << "a lookup on one side saw the other";
  }
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->entries(), 2u);
}

TEST_F(Host, DeviceCodeSentAsHostIsRefused) {
  auto saxpy = m_client->compile(host_request(read_test_data("kernels/saxpy.ll")));
  ASSERT_FALSE(saxpy);
  EXPECT_EQ(saxpy.error().code, ErrorCode::k_invalid_argument);
  EXPECT_NE(saxpy.error().message.find("send it with side device"), std::string::npos) << saxpy.error().message;

  v1::CompileRequest ptx = host_request(".version 8.0\n.target sm_90\n.address_size 64\n");
  auto refused = m_client->compile(ptx);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("PTX is device code"), std::string::npos) << refused.error().message;

  v1::CompileRequest cpu = host_request(k_add);
  cpu.mutable_options()->set_cpu("pentium9000");
  auto bad_cpu = m_client->compile(cpu);
  ASSERT_FALSE(bad_cpu);
  EXPECT_NE(bad_cpu.error().message.find("unknown CPU 'pentium9000'"), std::string::npos) << bad_cpu.error().message;
}

}  // namespace
}  // namespace kcache::test
