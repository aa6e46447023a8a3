// The job model: archs, sizes, formats, canonical specs and the images a job asks for.
#include <gtest/gtest.h>

#include <set>

#include "kcache/job.hpp"
#include "kcache/sha256.hpp"

namespace kcache {
namespace {

TEST(Sha256, MatchesTheStandardTestVector) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  auto parsed = digest_from_hex("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(*parsed, sha256("abc"));
  EXPECT_FALSE(digest_from_hex("ba78"));
  EXPECT_FALSE(digest_from_hex(std::string(64, 'g')));
}

TEST(SmArch, ParsesPlainAndVariantArchs) {
  auto a = parse_sm_arch("sm_90a");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->major, 9);
  EXPECT_EQ(a->minor, 0);
  EXPECT_EQ(a->variant, 'a');
  EXPECT_EQ(a->str(), "sm_90a");
  auto b = parse_sm_arch("sm_120f");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->major, 12);
  EXPECT_EQ(b->str(), "sm_120f");
  for (const char* bad : {"", "sm_", "sm_9", "sm_9000", "gfx90a", "sm_90x", "compute_90", "sm_0x"}) {
    EXPECT_FALSE(parse_sm_arch(bad)) << bad;
  }
}

TEST(ParseSize, AcceptsBytesAndBinarySuffixes) {
  EXPECT_EQ(parse_size("1234"), 1234u);
  EXPECT_EQ(parse_size("64K"), 64u << 10);
  EXPECT_EQ(parse_size("10G"), 10ULL << 30);
  EXPECT_EQ(parse_size("2m"), 2u << 20);
  for (const char* bad : {"", "G", "1.5G", "-1", "12Q", "99999999999999999999"}) EXPECT_FALSE(parse_size(bad)) << bad;
}

TEST(InferFormat, RecognisesBitcodePtxAndText) {
  EXPECT_EQ(infer_format(std::string("BC\xC0\xDE\x01\x02", 6)), InputFormat::llvm_bitcode);
  EXPECT_EQ(infer_format("//\n.version 8.0\n.target sm_90\n"), InputFormat::ptx);
  EXPECT_EQ(infer_format("define void @f() { ret void }"), InputFormat::llvm_text);
}

TEST(Canonicalize, FillsDefaultsAndSortsEntryPoints) {
  JobSpec spec;
  spec.options.entry_points = {"b", "a", "b"};
  spec.options.debug_info = true;
  spec.options.lineinfo = true;
  ASSERT_TRUE(canonicalize(spec, "x86_64-pc-linux-gnu"));
  EXPECT_EQ(spec.target, k_device_triple);
  EXPECT_EQ(spec.options.entry_points, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(spec.options.lineinfo);  // folded into debug_info

  JobSpec host;
  host.side = Side::host;
  ASSERT_TRUE(canonicalize(host, "x86_64-pc-linux-gnu"));
  EXPECT_EQ(host.target, "x86_64-pc-linux-gnu");
}

TEST(Canonicalize, RefusesOptionsThatDoNotFitTheSide) {
  JobSpec spec;
  spec.options.opt_level = 4;
  auto r = canonicalize(spec, "x86_64-pc-linux-gnu");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::k_invalid_argument);
  EXPECT_NE(r.error().message.find("out of range"), std::string::npos);

  JobSpec cpu;
  cpu.options.cpu = "znver3";
  EXPECT_FALSE(canonicalize(cpu, "x86_64-pc-linux-gnu"));

  JobSpec wrong;
  wrong.target = "x86_64-pc-linux-gnu";
  auto w = canonicalize(wrong, "x86_64-pc-linux-gnu");
  ASSERT_FALSE(w);
  EXPECT_NE(w.error().message.find("side host"), std::string::npos);

  JobSpec host;
  host.side = Side::host;
  host.target = "nvptx64-nvidia-cuda";
  EXPECT_FALSE(canonicalize(host, "x86_64-pc-linux-gnu"));
}

TEST(PlanImages, DeviceJobsGetEveryArchTimesEveryKind) {
  JobSpec spec;
  ASSERT_TRUE(canonicalize(spec, "x86_64-pc-linux-gnu"));
  auto images = plan_images(spec, {"sm_80", "sm_90", "sm_80"}, {ImageKind::ptx, ImageKind::cubin});
  ASSERT_TRUE(images);
  ASSERT_EQ(images->size(), 4u);
  EXPECT_EQ((*images)[0], (ImageRequest{"sm_80", ImageKind::ptx}));
  EXPECT_EQ((*images)[3], (ImageRequest{"sm_90", ImageKind::cubin}));

  auto defaults = plan_images(spec, {"sm_90"}, {});
  ASSERT_TRUE(defaults);
  EXPECT_EQ(defaults->front().kind, ImageKind::ptx);
}

TEST(PlanImages, RefusesMissingOrMalformedArchsAndForeignKinds) {
  JobSpec spec;
  ASSERT_TRUE(canonicalize(spec, "x86_64-pc-linux-gnu"));
  auto none = plan_images(spec, {}, {});
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("no arch"), std::string::npos);
  auto bad = plan_images(spec, {"gfx90a"}, {});
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("'gfx90a'"), std::string::npos);
  auto obj = plan_images(spec, {"sm_90"}, {ImageKind::object});
  ASSERT_FALSE(obj);
  EXPECT_NE(obj.error().message.find("obj"), std::string::npos);

  JobSpec host;
  host.side = Side::host;
  ASSERT_TRUE(canonicalize(host, "x86_64-pc-linux-gnu"));
  auto h = plan_images(host, {}, {});
  ASSERT_TRUE(h);
  EXPECT_EQ(h->front(), (ImageRequest{"x86_64", ImageKind::object}));
  EXPECT_FALSE(plan_images(host, {"sm_90"}, {}));
}

TEST(Names, EveryKindIsListedOnceAndItsNameParsesBack) {
  std::set<ImageKind> listed(all_kinds().begin(), all_kinds().end());
  EXPECT_EQ(listed.size(), all_kinds().size());
  for (int value = 1; value <= 6; ++value) {
    EXPECT_TRUE(listed.contains(static_cast<ImageKind>(value))) << "ImageKind " << value << " is not in all_kinds()";
  }
  for (ImageKind kind : all_kinds()) EXPECT_EQ(parse_kind(kind_name(kind)), kind);
  for (Side side : all_sides()) EXPECT_EQ(parse_side(side_name(side)), side);
  EXPECT_EQ(all_sides().size(), 2u);
}

TEST(Names, UnknownKindsAndSidesAreRefusedWithTheWholeList) {
  Error kind = unknown_kind_error("elf");
  EXPECT_EQ(kind.code, ErrorCode::k_invalid_argument);
  EXPECT_EQ(kind.message, "unknown image kind 'elf' (use ptx, cubin, ltoir, hsaco, amdgcn or obj)");
  Error side = unknown_side_error("gpu");
  EXPECT_EQ(side.code, ErrorCode::k_invalid_argument);
  EXPECT_EQ(side.message, "unknown side 'gpu' (use device or host)");
  EXPECT_EQ(outcome_name(Outcome::hit), "hit");
  EXPECT_EQ(outcome_name(Outcome::miss), "miss");
  EXPECT_EQ(outcome_name(Outcome::coalesced), "coalesced");
}

TEST(FormatNamed, CudaCppIsKnownFromTheStatedFormatOrTheNameNeverTheBytes) {
  EXPECT_EQ(format_named(std::nullopt, "src/k.cu"), InputFormat::cuda_cpp);
  EXPECT_EQ(format_named(InputFormat::llvm_text, "src/k.cu"), InputFormat::llvm_text) << "a stated format wins";
  EXPECT_EQ(format_named(InputFormat::cuda_cpp, "k.src"), InputFormat::cuda_cpp);
  EXPECT_EQ(format_named(std::nullopt, "k.ll"), std::nullopt) << "inferred from the bytes";
  EXPECT_EQ(format_named(std::nullopt, "k.cuh"), std::nullopt);
}

TEST(Canonicalize, OnlyCudaCppJobsCarryHeadersNvrtcOptionsOrNameExpressions) {
  JobSpec options;
  options.source.nvrtc_options = {"-DN=4"};
  JobSpec names;
  names.source.name_expressions = {"f<int>"};
  JobSpec headers;
  headers.source.headers = {{"a.cuh", {}}};
  for (JobSpec* spec : {&options, &names, &headers}) {
    auto checked = check_source_fields(*spec);
    ASSERT_FALSE(checked);
    EXPECT_EQ(checked.error().message,
              "headers, NVRTC options and name expressions belong to CUDA C++ jobs (format cu); this job is ll");
    EXPECT_FALSE(canonicalize(*spec, "x86_64-pc-linux-gnu")) << "canonicalize applies the same rule";
    spec->format = InputFormat::cuda_cpp;
    EXPECT_TRUE(check_source_fields(*spec));
  }
  EXPECT_TRUE(check_source_fields(JobSpec{}));
}

}  // namespace
}  // namespace kcache
