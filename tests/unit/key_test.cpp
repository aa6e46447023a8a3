// Key derivation: every input that changes the code changes the key; nothing else does.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kcache
