// Every bad input gets the right status and a message a person can act on; the daemon keeps
// serving and stores nothing for a failed job.
#include <thread>

#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

class BadInput : public DaemonTest {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--max-module-size", "64K", "--max-archs", "4"}; }

  void expect_refused(const v1::CompileRequest& request, ErrorCode code, const std::string& message) {
    auto r = m_client->compile(request);
    ASSERT_FALSE(r) << "accepted: " << message;
    EXPECT_EQ(r.error().code, code) << error_code_name(r.error().code) << ": " << r.error().message;
    EXPECT_NE(r.error().message.find(message), std::string::npos) << r.error().message;
  }

  void expect_still_serving() {
    auto ok = compile_patiently(device_request(read_test_data("kernels/saxpy.ll"), {"sm_80"}));
    ASSERT_TRUE(ok) << ok.error().message;
  }
};

TEST_F(BadInput, EachIsRefusedClearlyAndNothingIsStored) {
  const std::string saxpy = read_test_data("kernels/saxpy.ll");
  auto bitcode = [](std::string bytes) {
    v1::CompileRequest r = device_request(std::move(bytes), {"sm_90"});
    r.set_format(v1::FORMAT_LLVM_BITCODE);
    return r;
  };
  std::string random(4096, '\0');
  for (std::size_t i = 0; i < random.size(); ++i) random[i] = static_cast<char>((i * 7919u) ^ (i >> 3));

  expect_refused(device_request("", {"sm_90"}), ErrorCode::k_invalid_argument, "module is empty");
  expect_refused(device_request(random, {"sm_90"}), ErrorCode::k_invalid_argument, "syntax error at module.ll:");
  expect_refused(bitcode(random), ErrorCode::k_invalid_argument, "not LLVM bitcode");
  expect_refused(device_request("define void @f() {\n  ret i32 zork\n}\n", {"sm_90"}), ErrorCode::k_invalid_argument,
                 "module.ll:2:11: expected value token");
  expect_refused(device_request("define void @f() {\nentry:\n  br label %b\nb:\n  %x = add i32 %y, 1\n"
                                "  %y = add i32 %x, 1\n  ret void\n}\n",
                                {"sm_90"}),
                 ErrorCode::k_invalid_argument, "Instruction does not dominate all uses");
  expect_refused(device_request("target triple = \"x86_64-pc-linux-gnu\"\ndefine void @f() {\n  ret void\n}\n",
                                {"sm_90"}),
                 ErrorCode::k_invalid_argument, "target triple is 'x86_64-pc-linux-gnu'");
  v1::CompileRequest wrong_target = device_request(saxpy, {"sm_90"});
  wrong_target.set_target("x86_64-pc-linux-gnu");
  expect_refused(wrong_target, ErrorCode::k_invalid_argument, "'x86_64-pc-linux-gnu' is neither");
  expect_refused(device_request(saxpy, {"sm_99"}), ErrorCode::k_invalid_argument, "unknown arch 'sm_99'");
  // An AMD target ID asks for AMD images (hsaco), never PTX; NVPTX IR for it is refused in the
  // worker (tests/integration/amd_test.cpp).
  expect_refused(device_request(saxpy, {"gfx90a"}), ErrorCode::k_invalid_argument, "'ptx' is NVIDIA's");
  expect_refused(device_request(saxpy, {"gfx9000"}, {v1::KIND_HSACO}), ErrorCode::k_invalid_argument,
                 "unknown processor 'gfx9000'");
  expect_refused(device_request(saxpy, {}), ErrorCode::k_invalid_argument, "no arch given");
  expect_refused(device_request(saxpy, {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100"}), ErrorCode::k_invalid_argument,
                 "--max-archs");
  expect_refused(device_request(std::string(100 * 1024, ' ') + saxpy, {"sm_90"}), ErrorCode::k_resource_exhausted,
                 "--max-module-size");
  expect_refused(device_request(saxpy, {"sm_90"}, {v1::KIND_OBJECT}), ErrorCode::k_invalid_argument,
                 "not produced by device jobs");
  v1::CompileRequest opt = device_request(saxpy, {"sm_90"});
  opt.mutable_options()->set_opt_level(7);
  expect_refused(opt, ErrorCode::k_invalid_argument, "optimisation level 7");
  v1::CompileRequest entry = device_request(saxpy, {"sm_90"});
  entry.mutable_options()->add_entry_points("nope");
  expect_refused(entry, ErrorCode::k_invalid_argument, "entry point 'nope' is not defined in the module (defined functions: saxpy)");
  v1::CompileRequest host = device_request(saxpy, {});
  host.set_side(v1::SIDE_HOST);
  host.clear_emit();
  expect_refused(host, ErrorCode::k_invalid_argument, "a GPU triple: this is a device module, send it with side device");

  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->entries(), 0u);
  EXPECT_EQ(stats->errors(), 17u);
  expect_still_serving();
}

// Bitcode made for a newer GPU generation, asked for an older one: retargeted like any module
// (its target-cpu attributes are dropped), but an instruction the asked arch does not have is
// refused naming the instruction and the arch, not with LLVM's crash text; a fresh worker takes
// the next job.
TEST_F(BadInput, AnInstructionOfANewerGenerationIsRefusedByName) {
  const std::string cluster = R"(target triple = "nvptx64-nvidia-cuda"
define ptx_kernel void @arrive(ptr addrspace(1) %p) #0 {
  call void @llvm.nvvm.barrier.cluster.arrive()
  store i32 1, ptr addrspace(1) %p
  ret void
}
declare void @llvm.nvvm.barrier.cluster.arrive()
attributes #0 = { "target-cpu"="sm_90" "target-features"="+ptx80,+sm_90" }
)";
  auto r = m_client->compile(device_request(cluster, {"sm_80"}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::k_invalid_argument) << r.error().message;
  EXPECT_NE(r.error().message.find("'llvm.nvvm.barrier.cluster.arrive'"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("(sm_80) do not have"), std::string::npos) << r.error().message;
  expect_still_serving();
  // The arch it was made for compiles it.
  auto sm90 = m_client->compile(device_request(cluster, {"sm_90"}));
  ASSERT_TRUE(sm90) << sm90.error().message;
  EXPECT_NE(sm90->images(0).data().find("barrier.cluster.arrive"), std::string::npos);
}

// proto3 keeps any number a peer sends in an enum field. One the enum does not define is refused
// on every method, naming the field and the number, never read as a default (a Fetch with kind 99
// or side 77 once answered OK with an image).
TEST_F(BadInput, EnumNumbersNoEnumDefinesAreRefusedOnEveryMethod) {
  auto compiled = m_client->compile(device_request(read_test_data("kernels/saxpy.ll"), {"sm_80"}));
  ASSERT_TRUE(compiled) << compiled.error().message;
  auto refused = [](const auto& r, const std::string& says) {
    ASSERT_FALSE(r) << "accepted: " << says;
    EXPECT_EQ(r.error().code, ErrorCode::k_invalid_argument) << r.error().message;
    EXPECT_NE(r.error().message.find(says), std::string::npos) << r.error().message;
  };
  v1::FetchRequest fetch;
  fetch.set_key(compiled->key());
  fetch.set_arch("sm_80");
  fetch.set_kind(static_cast<v1::ImageKind>(99));
  refused(m_client->fetch(fetch), "kind is 99, which kcache.v1.ImageKind does not define: use KIND_UNSPECIFIED");
  fetch.set_kind(v1::KIND_PTX);
  fetch.set_side(static_cast<v1::Side>(77));
  refused(m_client->fetch(fetch), "side is 77, which kcache.v1.Side does not define");
  v1::LookupRequest lookup;
  lookup.set_side(static_cast<v1::Side>(77));
  lookup.add_keys(compiled->key());
  refused(m_client->lookup(lookup), "side is 77");
  v1::EvictRequest evict;
  evict.set_side(static_cast<v1::Side>(77));
  evict.add_keys(compiled->key());
  refused(m_client->evict(evict), "side is 77");
  v1::CompileRequest compile = device_request(read_test_data("kernels/saxpy.ll"), {"sm_80"});
  compile.set_side(static_cast<v1::Side>(77));
  refused(m_client->compile(compile), "side is 77");
  compile = device_request(read_test_data("kernels/saxpy.ll"), {"sm_80"}, {v1::KIND_PTX, static_cast<v1::ImageKind>(99)});
  refused(m_client->compile(compile), "emit[1] is 99");
  compile = device_request(read_test_data("kernels/saxpy.ll"), {"sm_80"});
  compile.mutable_options()->set_guard(static_cast<v1::HostGuard>(5));
  refused(m_client->compile(compile), "options.guard is 5, which kcache.v1.HostGuard does not define");
  fetch.set_side(v1::SIDE_DEVICE);
  auto fetched = m_client->fetch(fetch);
  ASSERT_TRUE(fetched) << fetched.error().message;
  EXPECT_EQ(fetched->data, compiled->images(0).data()) << "the entry was neither evicted nor changed";
  expect_still_serving();
}

TEST_F(BadInput, AMessageOverGrpcsLimitIsRefusedAndTheDaemonLivesOn) {
  auto r = m_client->compile(device_request(std::string(3 << 20, ' '), {"sm_90"}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::k_resource_exhausted);
  expect_still_serving();
}

class DefaultLimits : public BadInput {
 protected:
  std::vector<std::string> daemon_args() const override { return {}; }
};

// A Lookup's key count is checked in its bytes, before a list of keys is built: 900k keys (59 MB,
// within the default message limit) once raised kcached's peak memory by 160 MiB before they were
// refused. Now the message's own bytes are most of what it costs.
TEST_F(DefaultLimits, ALookupOfTooManyKeysIsRefusedBeforeItsKeysAreHeld) {
  v1::LookupRequest lookup;
  lookup.set_side(v1::SIDE_DEVICE);
  for (int i = 0; i < 900'000; ++i) lookup.add_keys(std::string(64, "0123456789abcdef"[i % 16]));
  ASSERT_GT(lookup.ByteSizeLong(), 59'000'000u);
  const std::uint64_t before = peak_rss(m_daemon->pid());
  auto r = m_client->lookup(lookup);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::k_invalid_argument) << r.error().message;
  EXPECT_NE(r.error().message.find("at most 10000 keys; this one names 900000"), std::string::npos) << r.error().message;
  const std::uint64_t grew = peak_rss(m_daemon->pid()) - before;
  std::fprintf(stderr, "kcached's peak memory grew by %llu MiB\n", static_cast<unsigned long long>(grew >> 20));
  if (!k_asan_build) {  // ASan's shadow memory makes resident sizes meaningless
    EXPECT_LT(grew, 100u << 20) << "the keys were never built";
  }
  lookup.mutable_keys()->DeleteSubrange(10'000, 890'000);
  auto allowed = m_client->lookup(lookup);
  ASSERT_TRUE(allowed) << allowed.error().message;
  EXPECT_EQ(allowed->results_size(), 10'000);
  expect_still_serving();
}

class NoToolkit : public BadInput {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--cuda-root", "/nonexistent/cuda"}; }
};

TEST_F(NoToolkit, CubinIsAFailedPreconditionAndPtxStillWorks) {
  auto caps = m_client->capabilities();
  ASSERT_TRUE(caps);
  EXPECT_FALSE(caps->cuda_present());
  expect_refused(device_request(read_test_data("kernels/saxpy.ll"), {"sm_90"}, {v1::KIND_CUBIN}),
                 ErrorCode::k_failed_precondition, "no CUDA toolkit (ptxas) under /nonexistent/cuda");
  expect_still_serving();
}

class JobTimeout : public BadInput {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--job-timeout", "1"}; }
};

TEST_F(JobTimeout, ASlowCompileIsStoppedAtTheJobTimeLimit) {
  // About 3 s of LLVM work: its worker is killed at 1 s, and nothing is stored.
  v1::CompileRequest request = device_request(slow_device_module(500), {"sm_90"});
  expect_refused(request, ErrorCode::k_deadline_exceeded, "ran past its time limit (--job-timeout)");
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->entries(), 0u);
  EXPECT_EQ(stats->worker_crashes(), 1u);
  expect_still_serving();
  stats = m_client->stats();
  ASSERT_TRUE(stats);
  // One, unless a busy machine also ran the next small job past the limit (compile_patiently).
  EXPECT_GE(stats->worker_restarts(), 1u);
}

// Build steps (the compiler launcher's Step): each bad request is refused with its status and a
// message naming what is wrong; a host object naming device-only symbols is never stored; the
// daemon keeps serving.
TEST_F(BadInput, EachBadBuildStepIsRefusedClearly) {
  auto expect_step_refused = [&](const v1::StepRequest& request, ErrorCode code, const std::string& message) {
    auto r = m_client->step(request);
    ASSERT_FALSE(r) << "accepted: " << message;
    EXPECT_EQ(r.error().code, code) << error_code_name(r.error().code) << ": " << r.error().message;
    EXPECT_NE(r.error().message.find(message), std::string::npos) << r.error().message;
  };
  const std::string some_identity(64, 'a');
  auto ptxas = [&] {
    v1::StepRequest r;
    r.set_tool(v1::STEP_TOOL_PTXAS);
    r.set_tool_digest(some_identity);
    for (const char* a : {"-arch=sm_80", "f0.ptx", "-o", "f1.cubin"}) r.add_args(a);
    v1::StepFile* in = r.add_inputs();
    in->set_name("f0.ptx");
    in->set_content(".version 8.0\n.target sm_80\n.address_size 64\n");
    r.add_outputs("f1.cubin");
    return r;
  };
  v1::StepRequest no_tool = ptxas();
  no_tool.clear_tool();
  expect_step_refused(no_tool, ErrorCode::k_invalid_argument, "names no tool");
  v1::StepRequest bad_digest = ptxas();
  bad_digest.set_tool_digest("cicc 13.0");
  expect_step_refused(bad_digest, ErrorCode::k_invalid_argument, "tool_digest is not a SHA-256");
  v1::StepRequest escapes = ptxas();
  escapes.set_args(3, "/tmp/owned.cubin");
  expect_step_refused(escapes, ErrorCode::k_invalid_argument, "is not a declared output");
  v1::StepRequest option_file = ptxas();
  option_file.add_args("--options-file");
  expect_step_refused(option_file, ErrorCode::k_invalid_argument, "is not an option kcache runs on the daemon");
  // clang's device compile: no plugin, no bitcode but libdevice, and the daemon's own clang.
  auto clang = [&] {
    v1::StepRequest r;
    r.set_tool(v1::STEP_TOOL_CLANG);
    r.set_tool_digest(some_identity);
    for (const char* a : {"-cc1", "-triple", "nvptx64-nvidia-cuda", "-fcuda-is-device", "-S", "-target-cpu", "sm_80",
                          "-mlink-builtin-bitcode", "libdevice.10.bc", "-o", "f1.s", "-x", "cuda-cpp-output", "f0.cui"}) {
      r.add_args(a);
    }
    v1::StepFile* in = r.add_inputs();
    in->set_name("f0.cui");
    in->set_content("__attribute__((global)) void k() {}\n");
    r.add_outputs("f1.s");
    return r;
  };
  v1::StepRequest plugin = clang();
  plugin.add_args("-load");
  plugin.add_args("/tmp/evil.so");
  expect_step_refused(plugin, ErrorCode::k_invalid_argument, "'-load' is not an option kcache runs on the daemon");
  v1::StepRequest other_bitcode = clang();
  other_bitcode.set_args(8, "/etc/passwd");
  expect_step_refused(other_bitcode, ErrorCode::k_invalid_argument, "is not libdevice");
  expect_step_refused(clang(), ErrorCode::k_failed_precondition, "the client runs the step itself");
  // Preprocessed text that would make cicc read a file of the daemon's host (cicc, like clang,
  // obeys #include in its .ii input): refused before anything runs.
  v1::StepRequest reads_a_file = clang();
  reads_a_file.mutable_inputs(0)->set_content("# 1 \"k.cu\"\n#include \"/etc/hostname\"\n");
  expect_step_refused(reads_a_file, ErrorCode::k_invalid_argument, "line 2: it holds a #include directive");
  v1::StepRequest path_name = ptxas();
  path_name.mutable_inputs(0)->set_name("../f0.ptx");
  expect_step_refused(path_name, ErrorCode::k_invalid_argument, "cannot name a step's file");
  v1::StepRequest too_big = ptxas();
  too_big.mutable_inputs(0)->set_content(std::string(65 << 10, ' '));
  expect_step_refused(too_big, ErrorCode::k_resource_exhausted, "--max-module-size");
  // Another toolkit's ptxas (or none here): the client runs the step itself.
  expect_step_refused(ptxas(), ErrorCode::k_failed_precondition, "the client runs the step itself");
  v1::StepRequest offered_device = ptxas();
  offered_device.mutable_offered()->set_content("x");
  expect_step_refused(offered_device, ErrorCode::k_invalid_argument, "only a host or nvcc step offers an object");

  // A host object naming a device-only symbol is refused by the host wall, and not stored.
  auto host = [&] {
    v1::StepRequest r;
    r.set_tool(v1::STEP_TOOL_HOST);
    r.set_tool_digest(some_identity);
    r.add_args("-O2");
    v1::StepFile* in = r.add_inputs();
    in->set_name("host.ii");
    in->set_sha256(std::string(64, 'b'));
    r.add_outputs("object");
    return r;
  };
  v1::StepRequest leaking = host();
  leaking.mutable_offered()->set_content(
      host_object_with_llc("declare ptr @gpu_malloc(i64)\ndefine ptr @f() {\n  %p = call ptr @gpu_malloc(i64 8)\n  ret ptr %p\n}\n"));
  expect_step_refused(leaking, ErrorCode::k_invalid_argument, "gpu_malloc");
  auto looked = m_client->step(host());
  ASSERT_TRUE(looked) << looked.error().message;
  EXPECT_EQ(looked->outcome(), v1::OUTCOME_MISS);
  EXPECT_EQ(looked->outputs_size(), 0);
  // A clean one is kept, and found.
  v1::StepRequest clean = host();
  std::string object = host_object_with_llc("define i32 @f() {\n  ret i32 7\n}\n");
  clean.mutable_offered()->set_content(object);
  clean.set_offered_stderr("warning: kept with the object\n");
  ASSERT_TRUE(m_client->step(clean));
  auto found = m_client->step(host());
  ASSERT_TRUE(found) << found.error().message;
  EXPECT_EQ(found->outcome(), v1::OUTCOME_HIT);
  ASSERT_EQ(found->outputs_size(), 1);
  EXPECT_TRUE(found->outputs(0).content() == object);
  EXPECT_EQ(found->stderr_text(), "warning: kept with the object\n");

  // nvcc's whole compile is a host entry too: behind the same wall, with one output, and what its
  // programs printed on either stream kept with the object.
  auto whole = [&] {
    v1::StepRequest r = host();
    r.set_tool(v1::STEP_TOOL_NVCC);
    r.clear_args();
    r.mutable_inputs(0)->set_name("plan");
    return r;
  };
  v1::StepRequest whole_leaking = whole();
  whole_leaking.mutable_offered()->set_content(
      host_object_with_llc("declare ptr @gpu_malloc(i64)\ndefine ptr @g() {\n  %p = call ptr @gpu_malloc(i64 8)\n  ret ptr %p\n}\n"));
  expect_step_refused(whole_leaking, ErrorCode::k_invalid_argument, "gpu_malloc");
  v1::StepRequest two_outputs = whole();
  two_outputs.add_outputs("f1.ptx");
  expect_step_refused(two_outputs, ErrorCode::k_invalid_argument, "nvcc steps have one output, 'object'");
  v1::StepRequest whole_clean = whole();
  whole_clean.mutable_offered()->set_content(object);
  whole_clean.set_offered_stderr("linear.cu(8): warning #177-D\n");
  whole_clean.set_offered_stdout("linear.cu\n");
  ASSERT_TRUE(m_client->step(whole_clean));
  auto whole_found = m_client->step(whole());
  ASSERT_TRUE(whole_found) << whole_found.error().message;
  EXPECT_EQ(whole_found->outcome(), v1::OUTCOME_HIT);
  ASSERT_EQ(whole_found->outputs_size(), 1);
  EXPECT_TRUE(whole_found->outputs(0).content() == object);
  EXPECT_EQ(whole_found->stderr_text(), "linear.cu(8): warning #177-D\n");
  EXPECT_EQ(whole_found->stdout_text(), "linear.cu\n");
  expect_still_serving();
}

}  // namespace
}  // namespace kcache::test
