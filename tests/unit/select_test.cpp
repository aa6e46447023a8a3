// Image selection follows CUDA's compatibility rules.
#include <gtest/gtest.h>

#include "kcache/select.hpp"

namespace kcache {
namespace {

std::optional<std::string> pick(const std::vector<ImageRequest>& images, const char* device,
                                 std::optional<ImageKind> kind = std::nullopt, bool* jit = nullptr) {
  auto s = select_image(images, *parse_sm_arch(device), kind);
  if (!s) return std::nullopt;
  if (jit != nullptr) *jit = s->needs_jit;
  return images[s->index].arch + "." + std::string(kind_name(images[s->index].kind));
}

TEST(SelectImage, PrefersTheExactCubin) {
  std::vector<ImageRequest> images = {{"sm_80", ImageKind::cubin}, {"sm_90", ImageKind::ptx}, {"sm_90", ImageKind::cubin}};
  bool jit = true;
  EXPECT_EQ(pick(images, "sm_90", std::nullopt, &jit), "sm_90.cubin");
  EXPECT_FALSE(jit);
}

TEST(SelectImage, TakesALowerMinorOfTheSameMajor) {
  std::vector<ImageRequest> images = {{"sm_80", ImageKind::cubin}, {"sm_86", ImageKind::cubin}, {"sm_75", ImageKind::cubin}};
  EXPECT_EQ(pick(images, "sm_89"), "sm_86.cubin");
  EXPECT_EQ(pick(images, "sm_87"), "sm_86.cubin");
  EXPECT_EQ(pick(images, "sm_80"), "sm_80.cubin");
  EXPECT_EQ(pick(images, "sm_90"), std::nullopt);  // other major: no cubin, and no PTX stored
}

TEST(SelectImage, NeverTakesAnArchSpecificCubinForAnotherArch) {
  std::vector<ImageRequest> images = {{"sm_90a", ImageKind::cubin}, {"sm_80", ImageKind::ptx}};
  bool jit = false;
  EXPECT_EQ(pick(images, "sm_90"), "sm_90a.cubin");  // sm_90a runs on sm_90
  EXPECT_EQ(pick({{"sm_100a", ImageKind::cubin}, {"sm_80", ImageKind::ptx}}, "sm_103", std::nullopt, &jit),
            "sm_80.ptx");
  EXPECT_TRUE(jit);
}

TEST(SelectImage, FallsBackToTheHighestPtxNotAboveTheDevice) {
  std::vector<ImageRequest> images = {{"sm_70", ImageKind::ptx}, {"sm_80", ImageKind::ptx}, {"sm_100", ImageKind::ptx},
                                      {"sm_90a", ImageKind::ptx}};
  bool jit = false;
  EXPECT_EQ(pick(images, "sm_90", std::nullopt, &jit), "sm_90a.ptx");
  EXPECT_TRUE(jit);
  EXPECT_EQ(pick(images, "sm_89"), "sm_80.ptx");
  EXPECT_EQ(pick(images, "sm_120"), "sm_100.ptx");
  EXPECT_EQ(pick(images, "sm_60"), std::nullopt);
}

TEST(SelectImage, HonoursAKindFilter) {
  std::vector<ImageRequest> images = {{"sm_90", ImageKind::cubin}, {"sm_90", ImageKind::ptx}};
  EXPECT_EQ(pick(images, "sm_90", ImageKind::ptx), "sm_90.ptx");
  EXPECT_EQ(pick({{"sm_80", ImageKind::ptx}}, "sm_90", ImageKind::cubin), std::nullopt);
}

}  // namespace
}  // namespace kcache
