// The HTTP image API's paths as clients build them (kcache/http_api.hpp).
#include <gtest/gtest.h>

#include "kcache/http_api.hpp"

namespace kcache {
namespace {

TEST(HttpApiPaths, AnImageIsNamedBySideKeyArchAndKind) {
  EXPECT_EQ(http_api::image_path(Side::device, "ab12", "sm_90", ImageKind::cubin), "/v1/device/ab12/sm_90/cubin");
  EXPECT_EQ(http_api::image_path(Side::host, "ab12", "x86_64", ImageKind::object), "/v1/host/ab12/x86_64/obj");
  EXPECT_TRUE(http_api::image_path(Side::device, "k", "a", ImageKind::ptx).starts_with(http_api::k_image_prefix));
}

TEST(HttpApiPaths, ASelectPathEncodesWhatTheCallerGaveAndAddsOnlyTheQueryItNeeds) {
  EXPECT_EQ(http_api::select_path(Side::device, "ab12", "sm_90", std::nullopt, 0), "/v1/select/device/ab12/sm_90");
  EXPECT_EQ(http_api::select_path(Side::device, "ab12", "gfx90a:xnack-", ImageKind::hsaco, 0),
            "/v1/select/device/ab12/gfx90a%3Axnack-?kind=hsaco");
  EXPECT_EQ(http_api::select_path(Side::host, "../k ey", "x86_64", std::nullopt, 12040),
            "/v1/select/host/..%2Fk%20ey/x86_64?driver=12040");
  EXPECT_EQ(http_api::select_path(Side::device, "k", "sm_80", ImageKind::ptx, 12040),
            "/v1/select/device/k/sm_80?kind=ptx&driver=12040");
  EXPECT_TRUE(http_api::select_path(Side::device, "k", "sm_80", std::nullopt, 0).starts_with(http_api::k_select_prefix));
}

}  // namespace
}  // namespace kcache
