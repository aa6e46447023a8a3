// What the status page keeps of what clients sent (server/cache/activity.hpp) stays within its
// bounds however much they send, and a browser's token cookie is read as a bearer token
// (api/http_api.hpp: http_authorization).
#include "cache/activity.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <string>
#include <vector>

#include "api/http_api.hpp"

namespace kcache::server {
namespace {

// An image whose `count` kernels have names of `name_bytes` bytes.
Image image_with_kernels(const std::string& arch, std::size_t count, std::size_t name_bytes) {
  std::vector<KernelInfo> kernels;
  for (std::size_t i = 0; i < count; ++i) {
    KernelInfo k;
    k.name = std::to_string(i) + std::string(name_bytes, 'k');
    k.registers = static_cast<std::uint32_t>(i);
    k.spill_stores = 2;
    k.spill_loads = 3;
    kernels.push_back(k);
  }
  return make_image({arch, ImageKind::ptx}, "bytes", kernels);
}

TEST(Activity, KeepsTheNewestCompilesAndErrorsWithinItsBounds) {
  Activity activity;
  std::vector<Image> images = {image_with_kernels("sm_80", 1000, 4096), image_with_kernels("sm_90", 10, 4096)};
  for (int i = 0; i < 60; ++i) activity.compiled(Side::device, "key" + std::to_string(i), images, i);
  // Each past its bound many times over (16 archs, 256 bytes a name, 4 KiB a message, 50 errors).
  std::vector<std::string> many_archs(200, std::string(4096, 'a'));
  for (int i = 0; i < 200; ++i) {
    activity.failed("compile", "key" + std::to_string(i), "device", many_archs,
                    make_error(ErrorCode::k_invalid_argument, std::string(64 << 10, '<')));
  }

  auto compiles = activity.compiles();
  ASSERT_EQ(compiles.size(), Activity::k_max_compiles);
  EXPECT_EQ(compiles.front().key, "key59");  // newest first
  EXPECT_EQ(compiles.front().kernel_count, 1000u);
  ASSERT_EQ(compiles.front().kernels.size(), Activity::k_max_kernels);
  EXPECT_EQ(compiles.front().archs, (std::vector<std::string>{"sm_80", "sm_90"}));
  for (const Activity::Kernel& k : compiles.front().kernels) {
    EXPECT_LE(k.name.size(), Activity::k_max_name_bytes);
    EXPECT_EQ(k.spills, 5u);
  }
  auto failures = activity.failures();
  ASSERT_EQ(failures.size(), Activity::k_max_errors);
  EXPECT_EQ(failures.front().key, "key199");
  EXPECT_EQ(failures.front().code, "INVALID_ARGUMENT");
  EXPECT_EQ(failures.front().message.size(), Activity::k_max_message_bytes);
  EXPECT_EQ(failures.front().archs.size(), Activity::k_max_archs);
  EXPECT_EQ(failures.front().archs.front().size(), Activity::k_max_name_bytes);
}

TEST(Activity, SamplesAtMostABoundOfCompileTimesPerInterval) {
  Activity activity;
  for (int i = 0; i < 10000; ++i) activity.compiled(Side::host, "k", {}, 1.0);
  EXPECT_EQ(activity.durations().size(), Activity::k_max_durations);
  EXPECT_EQ(activity.take_durations().size(), Activity::k_max_durations);
  EXPECT_TRUE(activity.durations().empty());  // the next interval starts empty
  activity.compiled(Side::host, "k", {}, 2.0);
  EXPECT_EQ(activity.take_durations(), std::vector<double>{2.0});
}

TEST(HttpAuthorization, TheHeaderWinsElseTheTokenCookieIsABearerToken) {
  httplib::Request req;
  EXPECT_EQ(http_authorization(req), "");
  req.set_header("Cookie", "theme=dark; kcache_token=abc123; other=1");
  EXPECT_EQ(http_authorization(req), "Bearer abc123");
  req.set_header("Authorization", "Bearer from-header");
  EXPECT_EQ(http_authorization(req), "Bearer from-header");

  httplib::Request empty;
  empty.set_header("Cookie", "kcache_token=");
  EXPECT_EQ(http_authorization(empty), "");
  httplib::Request lookalike;
  lookalike.set_header("Cookie", "my_kcache_token=abc; kcache_token_x=def");
  EXPECT_EQ(http_authorization(lookalike), "");
}

}  // namespace
}  // namespace kcache::server
