// Key derivation: every input that changes the code changes the key; nothing else does.
#include <gtest/gtest.h>

#include "compile/toolchain.hpp"
#include "kcache/amd_target.hpp"
#include "kcache/driver.hpp"
#include "kcache/key.hpp"

namespace kcache {
namespace {

Digest fingerprint(std::string_view seed) { return sha256(seed); }

Key key_of(JobSpec spec, std::string_view module = "module", std::string_view fp = "toolchain") {
  EXPECT_TRUE(canonicalize(spec, "x86_64-pc-linux-gnu"));
  return compute_key(spec, module, fingerprint(fp));
}

TEST(Key, IsStableAndHex) {
  JobSpec spec;
  Key a = key_of(spec), b = key_of(spec);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hex().size(), 64u);
  auto parsed = parse_key(a.hex());
  ASSERT_TRUE(parsed);
  EXPECT_EQ(*parsed, a);
  auto bad = parse_key("xyz");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::k_invalid_argument);
}

TEST(Key, ChangesWithEveryInput) {
  JobSpec base;
  Key k = key_of(base);
  EXPECT_NE(k, key_of(base, "module2"));
  EXPECT_NE(k, key_of(base, "module", "other toolchain"));
  auto changed = [&](auto mutate) {
    JobSpec s = base;
    mutate(s);
    return key_of(s) != k;
  };
  EXPECT_TRUE(changed([](JobSpec& s) { s.side = Side::host; }));
  EXPECT_TRUE(changed([](JobSpec& s) { s.format = InputFormat::llvm_bitcode; }));
  EXPECT_TRUE(changed([](JobSpec& s) { s.target = "nvptx64-nvidia-cuda-other"; }));
  EXPECT_TRUE(changed([](JobSpec& s) { s.options.opt_level = 3; }));
  EXPECT_TRUE(changed([](JobSpec& s) { s.options.debug_info = true; }));
  EXPECT_TRUE(changed([](JobSpec& s) { s.options.lineinfo = true; }));
  EXPECT_TRUE(changed([](JobSpec& s) { s.options.fast_math = true; }));
  EXPECT_TRUE(changed([](JobSpec& s) { s.options.entry_points = {"k"}; }));
}

TEST(Key, EncodingIsUnambiguous) {
  JobSpec one, two;
  one.options.entry_points = {"ab"};
  two.options.entry_points = {"a", "b"};
  EXPECT_NE(key_of(one), key_of(two));
}

TEST(Key, CanonicalFormsShareAKey) {
  JobSpec a, b;
  a.options.entry_points = {"x", "y"};
  b.options.entry_points = {"y", "x", "x"};
  b.target = std::string(k_device_triple);
  EXPECT_EQ(key_of(a), key_of(b));
  JobSpec debug, both;
  debug.options.debug_info = true;
  both.options.debug_info = true;
  both.options.lineinfo = true;
  EXPECT_EQ(key_of(debug), key_of(both));
}

// The encoding as common/KEY_FORMAT.md writes it, field by field, built here independently of
// key.cpp: a one-module job encodes as it did before linked modules existed, and each linked
// module is a tag 11 field (format byte, then its SHA-256), in order.
std::string field(std::uint8_t tag, std::string_view value) {
  std::string out(1, static_cast<char>(tag));
  for (int i = 0; i < 8; ++i) out += static_cast<char>((static_cast<std::uint64_t>(value.size()) >> (8 * i)) & 0xff);
  return out.append(value);
}

Key documented_key(const std::vector<std::pair<InputFormat, std::string_view>>& modules, const Digest& fp,
                   int ptx_isa_cap = 0) {
  std::string encoded = "kcache-key";
  encoded += field(1, std::string("\x01\x00\x00\x00", 4));
  encoded += field(2, as_bytes(fp));
  encoded += field(3, std::string(1, '\x01'));
  encoded += field(4, std::string(1, static_cast<char>(modules[0].first)));
  encoded += field(5, k_device_triple);
  encoded += field(6, "");
  encoded += field(7, std::string(1, '\x02'));
  encoded += field(8, std::string(1, '\x00'));
  encoded += field(10, as_bytes(sha256(modules[0].second)));
  for (std::size_t i = 1; i < modules.size(); ++i) {
    encoded += field(11, std::string(1, static_cast<char>(modules[i].first)) + std::string(as_bytes(sha256(modules[i].second))));
  }
  if (ptx_isa_cap != 0) encoded += field(12, std::string(1, static_cast<char>(ptx_isa_cap)));
  return Key{sha256(encoded)};
}

TEST(Key, LinkedModulesAreCoveredInOrderAsDocumented) {
  Digest fp = fingerprint("toolchain");
  JobSpec one;
  ASSERT_TRUE(canonicalize(one, "x86_64-pc-linux-gnu"));
  EXPECT_EQ(compute_key(one, "a", fp), documented_key({{InputFormat::llvm_text, "a"}}, fp));

  JobSpec three = one;
  three.linked_formats = {InputFormat::llvm_bitcode, InputFormat::ptx};
  std::vector<std::string_view> abc = {"a", "b", "c"}, acb = {"a", "c", "b"};
  Key k = compute_key(three, abc, fp);
  EXPECT_EQ(k, documented_key({{InputFormat::llvm_text, "a"}, {InputFormat::llvm_bitcode, "b"}, {InputFormat::ptx, "c"}}, fp));
  EXPECT_NE(k, compute_key(three, acb, fp)) << "order matters";
  EXPECT_NE(k, compute_key(one, "a", fp));
  JobSpec other_formats = three;
  other_formats.linked_formats = {InputFormat::llvm_text, InputFormat::ptx};
  EXPECT_NE(k, compute_key(other_formats, abc, fp)) << "each module's format is covered";
}

// A driver older than the daemon's PTX gives the key a tag 12 field; a new enough one (or none)
// keeps the key every other client computes, so they share images.
TEST(Key, AnOlderDriversPtxIsaCapIsCoveredAsDocumented) {
  Digest fp = fingerprint("toolchain");
  JobSpec none;
  ASSERT_TRUE(canonicalize(none, "x86_64-pc-linux-gnu"));
  JobSpec capped = none;
  capped.ptx_isa_cap = *ptx_isa_cap_for(12040, 90);
  EXPECT_EQ(capped.ptx_isa_cap, 84);
  EXPECT_EQ(compute_key(capped, "a", fp), documented_key({{InputFormat::llvm_text, "a"}}, fp, 84));
  EXPECT_NE(compute_key(capped, "a", fp), compute_key(none, "a", fp));
  JobSpec newer = none;
  newer.ptx_isa_cap = *ptx_isa_cap_for(13000, 90);
  EXPECT_EQ(compute_key(newer, "a", fp), compute_key(none, "a", fp)) << "a driver that takes ISA 9.0 shares the key";
  JobSpec other = none;
  other.ptx_isa_cap = *ptx_isa_cap_for(12080, 90);
  EXPECT_NE(compute_key(other, "a", fp), compute_key(capped, "a", fp)) << "12.8 (ISA 8.7) and 12.4 (8.4) differ";

  JobSpec host;
  host.side = Side::host;
  host.ptx_isa_cap = 84;
  ASSERT_TRUE(canonicalize(host, "x86_64-pc-linux-gnu"));
  EXPECT_EQ(host.ptx_isa_cap, 0) << "a driver JITs device code only";
}

// An AMD runtime that loads only older code objects gives the key a tag 16 field; one that loads
// everything the daemon writes states nothing. NVIDIA and host jobs take no such cap.
TEST(Key, AnOlderAmdRuntimesCodeObjectCapIsCoveredAsDocumented) {
  Digest fp = fingerprint("toolchain");
  JobSpec none;
  none.target = std::string(k_amd_device_triple);
  ASSERT_TRUE(canonicalize(none, "x86_64-pc-linux-gnu"));
  JobSpec rocm5 = none;
  rocm5.amd_code_object_cap = 4;
  ASSERT_TRUE(canonicalize(rocm5, "x86_64-pc-linux-gnu"));
  EXPECT_EQ(rocm5.amd_code_object_cap, 4);
  std::string encoded = "kcache-key";
  encoded += field(1, std::string("\x01\x00\x00\x00", 4));
  encoded += field(2, as_bytes(fp));
  encoded += field(3, std::string(1, '\x01'));
  encoded += field(4, std::string(1, static_cast<char>(InputFormat::llvm_text)));
  encoded += field(5, k_amd_device_triple);
  encoded += field(6, "");
  encoded += field(7, std::string(1, '\x02'));
  encoded += field(8, std::string(1, '\x00'));
  encoded += field(10, as_bytes(sha256("a")));
  encoded += field(16, std::string(1, '\x04'));
  EXPECT_EQ(compute_key(rocm5, "a", fp), Key{sha256(encoded)});
  EXPECT_NE(compute_key(rocm5, "a", fp), compute_key(none, "a", fp));
  JobSpec rocm6 = none;
  rocm6.amd_code_object_cap = 5;
  ASSERT_TRUE(canonicalize(rocm6, "x86_64-pc-linux-gnu"));
  EXPECT_NE(compute_key(rocm6, "a", fp), compute_key(rocm5, "a", fp));
  JobSpec newest = none;
  newest.amd_code_object_cap = 6;
  ASSERT_TRUE(canonicalize(newest, "x86_64-pc-linux-gnu"));
  EXPECT_EQ(newest.amd_code_object_cap, 0) << "6 loads all LLVM 22 writes";
  EXPECT_EQ(compute_key(newest, "a", fp), compute_key(none, "a", fp));

  JobSpec ancient = none;
  ancient.amd_code_object_cap = 3;
  auto refused = canonicalize(ancient, "x86_64-pc-linux-gnu");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("versions 4 to 6"), std::string::npos) << refused.error().message;
  JobSpec nvidia;
  nvidia.amd_code_object_cap = 4;
  auto not_amd = canonicalize(nvidia, "x86_64-pc-linux-gnu");
  ASSERT_FALSE(not_amd);
  EXPECT_NE(not_amd.error().message.find("only AMD jobs"), std::string::npos) << not_amd.error().message;
}

TEST(Key, LinkedModulesAreForTheDeviceAndBounded) {
  JobSpec host;
  host.side = Side::host;
  host.linked_formats = {InputFormat::llvm_text};
  auto refused = canonicalize(host, "x86_64-pc-linux-gnu");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::k_invalid_argument);
  JobSpec many;
  many.linked_formats.assign(k_max_job_modules, InputFormat::llvm_bitcode);
  auto too_many = canonicalize(many, "x86_64-pc-linux-gnu");
  ASSERT_FALSE(too_many);
  EXPECT_NE(too_many.error().message.find("at most 64"), std::string::npos) << too_many.error().message;
}


// A mixed fleet (x86-64 and aarch64 daemons with the same toolchain versions) shares device
// entries: the fingerprint leaves the host triple out. Host keys keep it through the target.
TEST(Key, DeviceKeysAreTheSameOnAnotherHostAndHostKeysAreNot) {
  server::Toolchain x86;
  x86.llvm_version = "22.1.0";
  x86.host_triple = "x86_64-pc-linux-gnu";
  x86.rtlib_digest = "rtlib";
  x86.cuda_present = true;
  x86.ptxas_version = "Cuda compilation tools, release 13.0, V13.0.48";
  x86.max_ptx_version = 90;
  server::Toolchain grace = x86;
  grace.host_triple = "aarch64-unknown-linux-gnu";
  ASSERT_EQ(server::toolchain_fingerprint(x86), server::toolchain_fingerprint(grace));
  server::Toolchain newer = x86;
  newer.ptxas_version = "Cuda compilation tools, release 13.1, V13.1.80";
  EXPECT_NE(server::toolchain_fingerprint(newer), server::toolchain_fingerprint(x86)) << "a toolkit shapes device output";

  auto key_on = [](const server::Toolchain& daemon, Side side) {
    JobSpec spec;
    spec.side = side;
    EXPECT_TRUE(canonicalize(spec, daemon.host_triple));
    return compute_key(spec, "define void @k() { ret void }", server::toolchain_fingerprint(daemon));
  };
  EXPECT_EQ(key_on(x86, Side::device), key_on(grace, Side::device));
  EXPECT_NE(key_on(x86, Side::host), key_on(grace, Side::host)) << "a host object is for its host alone";
  EXPECT_NE(key_on(x86, Side::host), key_on(x86, Side::device));
}

}  // namespace
}  // namespace kcache
