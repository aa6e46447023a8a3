// AMD target IDs (parsing, validation, the table against LLVM's own) and AMD image selection,
// table-driven like select_test.cpp's CUDA rules.
#include <gtest/gtest.h>

#include <llvm/ADT/SmallVector.h>
#include <llvm/TargetParser/TargetParser.h>

#include <set>

#include "kcache/amd_target.hpp"
#include "kcache/hip_loader.hpp"
#include "kcache/job.hpp"
#include "kcache/select.hpp"

namespace kcache {
namespace {

TEST(AmdTarget, ParsesAndPrintsCanonicalTargetIds) {
  struct Case {
    const char* text;
    const char* canonical;
    const char* features;
  };
  for (const Case& c : {Case{"gfx90a", "gfx90a", ""}, Case{"gfx90a:xnack-", "gfx90a:xnack-", "-xnack"},
                        Case{"gfx942:sramecc+:xnack-", "gfx942:sramecc+:xnack-", "+sramecc,-xnack"},
                        Case{"gfx942:xnack+:sramecc-", "gfx942:sramecc-:xnack+", "-sramecc,+xnack"},
                        Case{"gfx1030", "gfx1030", ""}, Case{"gfx1100", "gfx1100", ""}, Case{"gfx1201", "gfx1201", ""},
                        Case{"gfx9-generic:xnack+", "gfx9-generic:xnack+", "+xnack"},
                        Case{"gfx10-3-generic", "gfx10-3-generic", ""}, Case{"gfx11-generic", "gfx11-generic", ""},
                        Case{"gfx12-generic", "gfx12-generic", ""}}) {
    auto t = parse_amd_target(c.text);
    ASSERT_TRUE(t) << c.text << ": " << t.error().message;
    EXPECT_EQ(t->str(), c.canonical);
    EXPECT_EQ(t->llvm_features(), c.features) << c.text;
  }
}

TEST(AmdTarget, RefusesWhatTheTargetLacksWithAReason) {
  struct Case {
    const char* text;
    const char* says;
  };
  for (const Case& c : {Case{"gfx1999", "unknown processor 'gfx1999'"}, Case{"gfx803", "gfx9 and newer"},
                        Case{"gfx", "unknown processor"}, Case{"gfx1030:xnack+", "gfx1030 has no xnack setting"},
                        Case{"gfx1100:sramecc-", "gfx1100 has no sramecc setting"},
                        Case{"gfx900:sramecc+", "gfx900 has no sramecc"}, Case{"gfx90a:xnack", "is not a setting"},
                        Case{"gfx90a:xnack+:xnack-", "xnack is set twice"}, Case{"gfx90a:wavefrontsize64+", "unknown feature"},
                        Case{"gfx90a:", "is not a setting"}, Case{"gfx90a::xnack+", "is not a setting"}}) {
    auto t = parse_amd_target(c.text);
    ASSERT_FALSE(t) << c.text;
    EXPECT_EQ(t.error().code, ErrorCode::k_invalid_argument);
    EXPECT_NE(t.error().message.find(c.says), std::string::npos) << c.text << ": " << t.error().message;
  }
}

// The table is written out so clients need no LLVM; this holds it to the LLVM linked in: every
// gfx9-or-newer processor LLVM knows is in it, with LLVM's xnack, sramecc, wave32 and ISA version.
TEST(AmdTarget, TableAgreesWithLlvm) {
  llvm::SmallVector<llvm::StringRef> names;
  llvm::AMDGPU::fillValidArchListAMDGCN(names);
  std::set<std::string> from_llvm;
  for (llvm::StringRef name : names) {
    llvm::AMDGPU::GPUKind kind = llvm::AMDGPU::parseArchAMDGCN(name);
    std::string canonical = llvm::AMDGPU::getArchNameAMDGCN(kind).str();
    llvm::AMDGPU::IsaVersion isa = llvm::AMDGPU::getIsaVersion(canonical);
    if (isa.Major < 9) continue;
    from_llvm.insert(canonical);
    const AmdProcessor* p = find_amd_processor(canonical);
    ASSERT_NE(p, nullptr) << canonical << " is known to LLVM but missing from kcache's table";
    unsigned attrs = llvm::AMDGPU::getArchAttrAMDGCN(kind);
    EXPECT_EQ(p->xnack, (attrs & llvm::AMDGPU::FEATURE_XNACK) != 0) << canonical;
    EXPECT_EQ(p->sramecc, (attrs & llvm::AMDGPU::FEATURE_SRAMECC) != 0) << canonical;
    EXPECT_EQ(p->wave32, (attrs & llvm::AMDGPU::FEATURE_WAVE32) != 0) << canonical;
    EXPECT_EQ(p->isa_major, static_cast<int>(isa.Major)) << canonical;
    EXPECT_EQ(p->isa_minor, static_cast<int>(isa.Minor)) << canonical;
    EXPECT_EQ(p->isa_stepping, static_cast<int>(isa.Stepping)) << canonical;
  }
  for (const AmdProcessor& p : amd_processors()) {
    EXPECT_TRUE(from_llvm.contains(std::string(p.name))) << p.name << " is in kcache's table but not LLVM's";
    if (!p.generic.empty()) {
      const AmdProcessor* g = find_amd_processor(p.generic);
      ASSERT_NE(g, nullptr) << p.name;
      EXPECT_TRUE(g->is_generic());
      EXPECT_EQ(g->isa_major, p.isa_major) << p.name << " and its generic target are of one family";
    }
  }
}

std::optional<std::string> pick_amd(const std::vector<ImageRequest>& images, const char* device,
                                 std::optional<ImageKind> kind = std::nullopt) {
  auto s = select_for_side(Side::device, images, device, kind);
  EXPECT_TRUE(s) << device;
  if (!s || !s->has_value()) return std::nullopt;
  return images[(*s)->index].arch + "." + std::string(kind_name(images[(*s)->index].kind));
}

TEST(SelectAmdImage, FollowsTheTargetIdRules) {
  using K = ImageKind;
  struct Case {
    std::vector<ImageRequest> stored;
    const char* device;
    std::optional<std::string> expected;
  };
  const std::vector<Case> cases = {
      // 1. the exact target ID wins over compatible ones
      {{{"gfx90a", K::hsaco}, {"gfx90a:xnack-", K::hsaco}, {"gfx90a:sramecc+:xnack-", K::hsaco}},
       "gfx90a:sramecc+:xnack-", "gfx90a:sramecc+:xnack-.hsaco"},
      // 2. a setting left unspecified (any) serves both; the most specific compatible image first
      {{{"gfx90a", K::hsaco}}, "gfx90a:sramecc+:xnack+", "gfx90a.hsaco"},
      {{{"gfx90a", K::hsaco}}, "gfx90a:sramecc-:xnack-", "gfx90a.hsaco"},
      {{{"gfx90a", K::hsaco}, {"gfx90a:xnack-", K::hsaco}}, "gfx90a:sramecc+:xnack-", "gfx90a:xnack-.hsaco"},
      // ... and on or off serves only the same setting
      {{{"gfx90a:xnack+", K::hsaco}}, "gfx90a:sramecc+:xnack-", std::nullopt},
      {{{"gfx90a:xnack+", K::hsaco}, {"gfx90a", K::hsaco}}, "gfx90a:xnack-", "gfx90a.hsaco"},
      {{{"gfx942:sramecc-", K::hsaco}}, "gfx942:sramecc+:xnack-", std::nullopt},
      // a device whose setting is not stated is served only by images that leave it any
      {{{"gfx90a:xnack-", K::hsaco}}, "gfx90a", std::nullopt},
      {{{"gfx90a:xnack-", K::hsaco}, {"gfx90a", K::hsaco}}, "gfx90a", "gfx90a.hsaco"},
      // 3. the family's generic code object, by the same settings rule, after the processor's own
      {{{"gfx11-generic", K::hsaco}}, "gfx1100", "gfx11-generic.hsaco"},
      {{{"gfx11-generic", K::hsaco}, {"gfx1100", K::hsaco}}, "gfx1100", "gfx1100.hsaco"},
      {{{"gfx11-generic", K::hsaco}}, "gfx1151", "gfx11-generic.hsaco"},
      {{{"gfx10-3-generic", K::hsaco}}, "gfx1030", "gfx10-3-generic.hsaco"},
      {{{"gfx12-generic", K::hsaco}}, "gfx1201", "gfx12-generic.hsaco"},
      {{{"gfx9-generic:xnack-", K::hsaco}}, "gfx906:sramecc+:xnack-", "gfx9-generic:xnack-.hsaco"},
      {{{"gfx9-generic:xnack-", K::hsaco}}, "gfx906:sramecc+:xnack+", std::nullopt},
      {{{"gfx9-4-generic", K::hsaco}}, "gfx942:sramecc+:xnack-", "gfx9-4-generic.hsaco"},
      // never another processor, another family's generic target, or a processor without one
      {{{"gfx1100", K::hsaco}}, "gfx1101", std::nullopt},
      {{{"gfx10-3-generic", K::hsaco}}, "gfx1100", std::nullopt},
      {{{"gfx9-generic", K::hsaco}}, "gfx90a", std::nullopt},
      {{{"gfx9-generic", K::hsaco}}, "gfx942", std::nullopt},
      // 4. nothing for NVIDIA images or assembly
      {{{"sm_90", K::cubin}, {"gfx1100", K::amdgcn}}, "gfx1100", std::nullopt},
  };
  for (const Case& c : cases) {
    std::string stored;
    for (const ImageRequest& r : c.stored) stored += r.arch + "." + std::string(kind_name(r.kind)) + " ";
    EXPECT_EQ(pick_amd(c.stored, c.device), c.expected) << "device " << c.device << ", stored " << stored;
  }
}

TEST(SelectAmdImage, AssemblyOnlyByKindAndExactTarget) {
  std::vector<ImageRequest> images = {{"gfx1100", ImageKind::hsaco}, {"gfx1100", ImageKind::amdgcn},
                                      {"gfx11-generic", ImageKind::amdgcn}};
  EXPECT_EQ(pick_amd(images, "gfx1100", ImageKind::amdgcn), "gfx1100.amdgcn");
  EXPECT_EQ(pick_amd(images, "gfx1101", ImageKind::amdgcn), std::nullopt);
  EXPECT_EQ(pick_amd(images, "gfx1100", ImageKind::hsaco), "gfx1100.hsaco");
  EXPECT_EQ(pick_amd(images, "gfx1100", ImageKind::cubin), std::nullopt);
}

TEST(SelectAmdImage, AnInvalidDeviceTargetIsInvalidArgument) {
  std::vector<ImageRequest> images = {{"gfx1100", ImageKind::hsaco}};
  auto s = select_for_side(Side::device, images, "gfx1100:xnack+", std::nullopt);
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, ErrorCode::k_invalid_argument);
  EXPECT_NE(s.error().message.find("gfx1100 has no xnack setting"), std::string::npos) << s.error().message;
  // NVIDIA selection never takes an AMD image, and the reverse.
  auto nv = select_for_side(Side::device, images, "sm_90", std::nullopt);
  ASSERT_TRUE(nv);
  EXPECT_FALSE(nv->has_value());
}

JobSpec amd_spec(const std::vector<std::string>& archs) {
  JobSpec spec;
  spec.side = Side::device;
  spec.format = InputFormat::llvm_text;
  spec.target = implied_device_target(archs);
  return spec;
}

TEST(AmdJob, GfxArchsImplyTheAmdTargetAndPlanCanonicalImages) {
  std::vector<std::string> archs = {"gfx90a", "gfx942:xnack-:sramecc+", "gfx1100"};
  JobSpec spec = amd_spec(archs);
  EXPECT_EQ(spec.target, "amdgcn-amd-amdhsa");
  ASSERT_TRUE(canonicalize(spec, "x86_64-pc-linux-gnu"));
  EXPECT_TRUE(targets_amd(spec));
  auto planned = plan_images(spec, archs, {});
  ASSERT_TRUE(planned) << planned.error().message;
  std::vector<ImageRequest> expected = {{"gfx90a", ImageKind::hsaco},
                                        {"gfx942:sramecc+:xnack-", ImageKind::hsaco},
                                        {"gfx1100", ImageKind::hsaco}};
  EXPECT_EQ(*planned, expected);
  auto both = plan_images(spec, {"gfx1100"}, {ImageKind::hsaco, ImageKind::amdgcn});
  ASSERT_TRUE(both);
  EXPECT_EQ(both->size(), 2u);
  EXPECT_EQ(kind_extension(ImageKind::amdgcn), "s");
  EXPECT_EQ(parse_kind("hsaco"), ImageKind::hsaco);
  EXPECT_EQ(implied_device_target({"sm_90"}), "");
  EXPECT_EQ(implied_device_target({"gfx90a", "sm_90"}), "");
}

TEST(AmdJob, RefusesMixedVendorsBadTargetsAndNvidiaKinds) {
  struct Case {
    std::vector<std::string> archs;
    std::vector<ImageKind> kinds;
    const char* says;
  };
  for (const Case& c : {Case{{"gfx1999"}, {}, "unknown processor 'gfx1999'"},
                        Case{{"gfx1030:xnack+"}, {}, "gfx1030 has no xnack setting"},
                        Case{{"gfx90a"}, {ImageKind::cubin}, "'cubin' is NVIDIA's"},
                        Case{{"gfx90a"}, {ImageKind::ptx}, "'ptx' is NVIDIA's"}}) {
    JobSpec spec = amd_spec(c.archs);
    ASSERT_TRUE(canonicalize(spec, "x86_64-pc-linux-gnu"));
    auto planned = plan_images(spec, c.archs, c.kinds);
    ASSERT_FALSE(planned) << c.says;
    EXPECT_EQ(planned.error().code, ErrorCode::k_invalid_argument);
    EXPECT_NE(planned.error().message.find(c.says), std::string::npos) << planned.error().message;
  }
  // Mixed: the target stays NVIDIA's, and the gfx arch is refused, naming the fix.
  std::vector<std::string> mixed = {"sm_90", "gfx90a"};
  JobSpec spec = amd_spec(mixed);
  ASSERT_TRUE(canonicalize(spec, "x86_64-pc-linux-gnu"));
  auto planned = plan_images(spec, mixed, {});
  ASSERT_FALSE(planned);
  EXPECT_NE(planned.error().message.find("separate jobs"), std::string::npos) << planned.error().message;
  // hsaco for an NVIDIA job.
  JobSpec nv = amd_spec({"sm_90"});
  ASSERT_TRUE(canonicalize(nv, "x86_64-pc-linux-gnu"));
  auto hsaco = plan_images(nv, {"sm_90"}, {ImageKind::hsaco});
  ASSERT_FALSE(hsaco);
  EXPECT_NE(hsaco.error().message.find("is AMD's"), std::string::npos) << hsaco.error().message;
  // PTX input, and a CUDA driver version, for an AMD job.
  JobSpec ptx = amd_spec({"gfx90a"});
  ptx.format = InputFormat::ptx;
  auto refused = canonicalize(ptx, "x86_64-pc-linux-gnu");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("AMD jobs (gfx archs) take LLVM IR"), std::string::npos);
  JobSpec capped = amd_spec({"gfx90a"});
  capped.ptx_isa_cap = 78;
  ASSERT_FALSE(canonicalize(capped, "x86_64-pc-linux-gnu"));
}

// HIP_VERSION (major * 10^7 + minor * 10^5 + patch) to the newest code object version the
// runtime loads: 4 under ROCm 5 (Debian's HIP 5.2.3), 5 under 6.0 and 6.1, anything from 6.2.
TEST(HipCodeObjectVersion, FollowsTheRocmReleases) {
  EXPECT_EQ(hip_code_object_version(50223144), 4) << "Debian 12's HIP 5.2.3";
  EXPECT_EQ(hip_code_object_version(50731921), 4) << "ROCm 5.7.1";
  EXPECT_EQ(hip_code_object_version(60032830), 5) << "ROCm 6.0.2";
  EXPECT_EQ(hip_code_object_version(60140093), 5) << "ROCm 6.1";
  EXPECT_EQ(hip_code_object_version(60241134), 0) << "ROCm 6.2";
  EXPECT_EQ(hip_code_object_version(70000000), 0);
}

}  // namespace
}  // namespace kcache
