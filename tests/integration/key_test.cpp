// Keys: the client computes the same key as the daemon for every option; everything that changes
// the code changes the key, and the arch list does not.
#include "daemon_fixture.hpp"

namespace kcache::test {
namespace {

using Keys = DaemonTest;

TEST_F(Keys, ClientAndServerAgreeForEveryOption) {
  const std::string saxpy = read_test_data("kernels/saxpy.ll");
  std::vector<std::pair<std::string, std::function<void(v1::CompileRequest&)>>> variants = {
      {"defaults", [](v1::CompileRequest&) {}},
      {"O0", [](v1::CompileRequest& r) { r.mutable_options()->set_opt_level(0); }},
      {"O3", [](v1::CompileRequest& r) { r.mutable_options()->set_opt_level(3); }},
      {"debug", [](v1::CompileRequest& r) { r.mutable_options()->set_debug_info(true); }},
      {"lineinfo", [](v1::CompileRequest& r) { r.mutable_options()->set_lineinfo(true); }},
      {"fast-math", [](v1::CompileRequest& r) { r.mutable_options()->set_fast_math(true); }},
      {"entry", [](v1::CompileRequest& r) { r.mutable_options()->add_entry_points("saxpy"); }},
      {"explicit target", [](v1::CompileRequest& r) { r.set_target("nvptx64-nvidia-cuda"); }},
      {"explicit format", [](v1::CompileRequest& r) { r.set_format(v1::FORMAT_LLVM_TEXT); }},
      {"bitcode", [&](v1::CompileRequest& r) { r.set_module(to_bitcode(saxpy)); }},
      {"other module", [](v1::CompileRequest& r) { r.mutable_module()->append("\n; a comment\n"); }},
  };
  std::set<std::string> distinct;
  for (auto& [name, mutate] : variants) {
    v1::CompileRequest request = device_request(saxpy, {"sm_80"});
    mutate(request);
    auto local = m_client->compute_key(request);
    ASSERT_TRUE(local) << name << ": " << local.error().message;
    auto remote = m_client->compile(request);
    ASSERT_TRUE(remote) << name << ": " << remote.error().message;
    EXPECT_EQ(local->hex(), remote->key()) << name;
    distinct.insert(remote->key());
  }
  // "explicit target" and "explicit format" spell out the defaults: same key as "defaults".
  EXPECT_EQ(distinct.size(), variants.size() - 2);
}

TEST_F(Keys, ArchAndEmitNameImagesNotKeys) {
  const std::string saxpy = read_test_data("kernels/saxpy.ll");
  auto a = m_client->compute_key(device_request(saxpy, {"sm_80"}));
  auto b = m_client->compute_key(device_request(saxpy, {"sm_90", "sm_120"}, {v1::KIND_PTX, v1::KIND_CUBIN}));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, *b);
}

TEST_F(Keys, SideIsPartOfTheKey) {
  const std::string saxpy = read_test_data("kernels/saxpy.ll");
  v1::CompileRequest host = device_request(saxpy, {});
  host.set_side(v1::SIDE_HOST);
  host.clear_emit();
  auto device_key = m_client->compute_key(device_request(saxpy, {"sm_80"}));
  auto host_key = m_client->compute_key(host);
  ASSERT_TRUE(device_key && host_key);
  EXPECT_NE(*device_key, *host_key);
}

// Text IR and the bitcode of the same module are different inputs and get different keys
// (keys hash the bytes sent, so the hit path never parses); they compile to the same PTX.
TEST_F(Keys, TextAndBitcodeOfOneModuleHaveDifferentKeysAndTheSamePtx) {
  const std::string saxpy = read_test_data("kernels/saxpy.ll");
  auto text = m_client->compile(device_request(saxpy, {"sm_90"}));
  auto bitcode = m_client->compile(device_request(to_bitcode(saxpy), {"sm_90"}));
  ASSERT_TRUE(text && bitcode);
  EXPECT_NE(text->key(), bitcode->key());
  EXPECT_EQ(text->images(0).data(), bitcode->images(0).data());
}

}  // namespace
}  // namespace kcache::test
