// Image selection follows CUDA's compatibility rules.
#include <gtest/gtest.h>

#include <algorithm>

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

// The images of a key as a daemon of CUDA 13.0 stores them, each PTX with its .version, and which
// PTX select_for_driver read.
struct Stored {
  std::vector<ImageRequest> images;
  std::vector<std::string> ptx;  // per image: the PTX text; unused for a cubin
  std::vector<std::size_t> read;
  PtxText text() {
    return [this](std::size_t i) -> Expected<std::string_view> {
      read.push_back(i);
      return std::string_view(ptx[i]);
    };
  }
  // "sm_80.cubin", "sm_75.ptx (JIT)", "none" or "none: driver too old".
  std::string choose(const std::string& device, CudaVersion driver, CudaVersion toolkit = 13000,
                     Side side = Side::device) {
    auto choice = select_for_driver(side, images, device, std::nullopt, driver, toolkit, text());
    if (!choice) return "error: " + choice.error().message;
    if (!choice->chosen) return choice->driver_too_old ? "none: driver too old" : "none";
    EXPECT_FALSE(choice->driver_too_old) << "too old, yet an image was chosen";
    const ImageRequest& im = images[choice->chosen->index];
    return im.arch + "." + std::string(kind_name(im.kind)) + (choice->chosen->needs_jit ? " (JIT)" : "");
  }
};

TEST(SelectForDriver, WithoutADriverChoosesAsSelectImageAndReadsNoPtx) {
  Stored s{{{"sm_80", ImageKind::ptx}, {"sm_80", ImageKind::cubin}}, {".version 9.0\n", ""}, {}};
  EXPECT_EQ(s.choose("sm_86", 0), "sm_80.cubin");
  EXPECT_TRUE(s.read.empty());
}

// Table-driven over drivers: a CUDA 13 daemon's cubin and PTX 9.0 for sm_80, and PTX 8.4 for sm_75.
TEST(SelectForDriver, PassesOverCubinsOfANewerToolkitAndPtxAboveTheDriversIsa) {
  Stored s{{{"sm_80", ImageKind::cubin}, {"sm_80", ImageKind::ptx}, {"sm_75", ImageKind::ptx}},
           {"", ".version 9.0\n.target sm_80\n", ".version 8.4\n.target sm_75\n"},
           {}};
  struct Case {
    CudaVersion driver;
    const char* expected;
  };
  for (Case c : {Case{14000, "sm_80.cubin"}, Case{13000, "sm_80.cubin"}, Case{12080, "sm_75.ptx (JIT)"},
                 Case{12040, "sm_75.ptx (JIT)"}, Case{12030, "none: driver too old"},
                 Case{11080, "none: driver too old"}}) {
    EXPECT_EQ(s.choose("sm_86", c.driver), c.expected) << "driver " << cuda_version_name(c.driver);
  }
  // A cubin from a toolkit nobody recorded is taken as loadable, as driver_loads says.
  EXPECT_EQ(s.choose("sm_86", 11080, 0), "sm_80.cubin");
}

TEST(SelectForDriver, TheDriverIsTooOldOnlyWhereAnImageRunsOnTheDevice) {
  Stored s{{{"sm_90", ImageKind::cubin}, {"sm_90", ImageKind::ptx}}, {"", ".version 9.0\n"}, {}};
  EXPECT_EQ(s.choose("sm_90", 12000), "none: driver too old");
  EXPECT_EQ(s.choose("sm_80", 12000), "none") << "nothing stored runs on sm_80, whatever the driver";
  EXPECT_EQ(s.choose("sm_80", 0), "none");
}

TEST(SelectForDriver, ReadsOnlyThePtxTheRulesWouldTake) {
  Stored s{{{"sm_90", ImageKind::ptx}, {"sm_80", ImageKind::cubin}, {"sm_75", ImageKind::ptx}},
           {".version 9.0\n", "", ".version 8.4\n"},
           {}};
  EXPECT_EQ(s.choose("sm_80", 13000), "sm_80.cubin");
  for (std::size_t i : s.read) EXPECT_EQ(s.images[i].kind, ImageKind::ptx) << "a cubin's bytes are never read";
  EXPECT_EQ(std::count(s.read.begin(), s.read.end(), 0u), 0) << "PTX for sm_90 cannot run on sm_80: never read";
}

TEST(SelectForDriver, AnUnreadablePtxIsPassedOverAndWouldBlockStopsTheSelection) {
  std::vector<ImageRequest> images = {{"sm_80", ImageKind::ptx}, {"sm_75", ImageKind::ptx}};
  auto unreadable_first = [](std::size_t i) -> Expected<std::string_view> {
    if (i == 0) return make_error(ErrorCode::k_not_found, "gone");
    return std::string_view(".version 8.4\n");
  };
  auto chosen = select_for_driver(Side::device, images, "sm_80", std::nullopt, 12040, 13000, unreadable_first);
  ASSERT_TRUE(chosen) << chosen.error().message;
  ASSERT_TRUE(chosen->chosen);
  EXPECT_EQ(chosen->chosen->index, 1u);

  auto blocked = select_for_driver(Side::device, images, "sm_80", std::nullopt, 12040, 13000,
                                   [](std::size_t) -> Expected<std::string_view> { return would_block(); });
  ASSERT_FALSE(blocked);
  EXPECT_TRUE(is_would_block(blocked.error()));
}

TEST(SelectForDriver, HostImagesAndAmdArchsTakeNoDriverFilter) {
  Stored host{{{"x86_64", ImageKind::object}}, {""}, {}};
  EXPECT_EQ(host.choose("x86_64", 11080, 13000, Side::host), "x86_64.obj");
  EXPECT_TRUE(host.read.empty());
  Stored amd{{{"gfx90a", ImageKind::hsaco}}, {""}, {}};
  EXPECT_EQ(amd.choose("gfx90a", 11080), "gfx90a.hsaco");
  EXPECT_TRUE(amd.read.empty());
  Stored none{{{"sm_80", ImageKind::ptx}}, {".version 8.0\n"}, {}};
  EXPECT_NE(none.choose("x86_64", 12040).find("is not a GPU arch"), std::string::npos) << "select_for_side's error";
}

}  // namespace
}  // namespace kcache
