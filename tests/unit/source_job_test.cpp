// CUDA C++ source jobs without a daemon: the NVRTC option allow-list and its canonical form, the
// key fields of a source job, the include scanner both ends use, the client's header collection,
// and lowered names in the store's image metadata.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "kcache/includes.hpp"
#include "kcache/key.hpp"
#include "kcache/source_headers.hpp"
#include "store/records.hpp"
#include "test_support.hpp"

namespace kcache::test {
namespace {

std::vector<std::string> canonical(const std::vector<std::string>& options) {
  auto out = canonical_nvrtc_options(options);
  EXPECT_TRUE(out) << out.error().message;
  return out ? *out : std::vector<std::string>{};
}

std::string refusal(const std::vector<std::string>& options) {
  auto out = canonical_nvrtc_options(options);
  EXPECT_FALSE(out) << "accepted";
  if (out) return {};
  EXPECT_EQ(out.error().code, ErrorCode::k_invalid_argument);
  return out.error().message;
}

TEST(NvrtcOptions, EachSpellingIsOneCanonicalOptionFlagsSortedMacrosLastOneWins) {
  EXPECT_EQ(canonical({"-std=c++17", "-use_fast_math", "-DB=2", "-DA", "--generate-line-info"}),
            (std::vector<std::string>{"--std=c++17", "--use_fast_math", "-lineinfo", "-DA", "-DB=2"}));
  EXPECT_EQ(canonical({"--define-macro=N=4", "--std=c++14", "-D", "M", "--std=c++17", "-rdc=false"}),
            (std::vector<std::string>{"--std=c++17", "-DM", "-DN=4"}));
  // For one macro, the last -D or -U decides, in the order given.
  EXPECT_EQ(canonical({"-DX=1", "-UX"}), (std::vector<std::string>{"-UX"}));
  EXPECT_EQ(canonical({"-UX", "-DX=2"}), (std::vector<std::string>{"-DX=2"}));
  EXPECT_EQ(canonical({"--relocatable-device-code=true", "--maxrregcount=64", "-dopt=off", "-G", "-default-device",
                       "--extra-device-vectorization"}),
            (std::vector<std::string>{"--extra-device-vectorization", "--maxrregcount=64", "-G", "-default-device",
                                      "-dopt=off", "-rdc=true"}));
  EXPECT_EQ(canonical({}), std::vector<std::string>{});
}

TEST(NvrtcOptions, FilesTheArchAndUnknownOptionsAreRefusedByName) {
  for (const char* o : {"-I/etc", "-I", "--include-path=/x", "--pre-include=/etc/passwd", "-include", "--pch",
                        "--create-pch=x.pch", "--use-pch=x", "--pch-dir=/tmp"}) {
    EXPECT_NE(refusal({o}).find("it reads files on the daemon"), std::string::npos) << o;
  }
  EXPECT_NE(refusal({"-arch=sm_80"}).find("the arch comes from the job"), std::string::npos);
  EXPECT_NE(refusal({"--gpu-architecture=compute_90"}).find("the arch comes from the job"), std::string::npos);
  EXPECT_NE(refusal({"-dlto"}).find("ask for ltoir images"), std::string::npos);
  EXPECT_NE(refusal({"--keep"}).find("not on kcache's allow-list"), std::string::npos);
  EXPECT_NE(refusal({"-std=c++98"}).find("the value is one of"), std::string::npos);
  EXPECT_NE(refusal({"--maxrregcount=4"}).find("16 to 255"), std::string::npos);
  EXPECT_NE(refusal({"-G=1"}).find("takes no value"), std::string::npos);
  EXPECT_NE(refusal({"-D1X"}).find("not a macro name"), std::string::npos);
  EXPECT_NE(refusal({"-UX=1"}).find("without a value"), std::string::npos);
  EXPECT_NE(refusal({"-D"}).find("needs a macro"), std::string::npos);
}

JobSpec source_spec(std::vector<std::string> options = {}, std::vector<SourceHeader> headers = {},
                    std::vector<std::string> names = {}) {
  JobSpec spec;
  spec.format = InputFormat::cuda_cpp;
  spec.source = {std::move(headers), std::move(options), std::move(names)};
  auto ok = canonicalize(spec, "x86_64-pc-linux-gnu");
  EXPECT_TRUE(ok) << ok.error().message;
  return spec;
}

TEST(SourceKey, HeadersOptionsAndNamesEnterTheKeyInCanonicalOrder) {
  Digest fp = sha256("toolchain");
  const std::string src = "__global__ void f() {}";
  SourceHeader a{"a.cuh", sha256("a")}, b{"sub/b.cuh", sha256("b")};
  Key base = compute_key(source_spec({"-DA=1", "-DB=2"}, {a, b}, {"f"}), src, fp);
  EXPECT_EQ(compute_key(source_spec({"-DB=2", "--define-macro=A=1"}, {b, a}, {"f", "f"}), src, fp), base);
  EXPECT_NE(compute_key(source_spec({"-DA=1", "-DB=2"}, {a, {"sub/b.cuh", sha256("b changed")}}, {"f"}), src, fp), base);
  EXPECT_NE(compute_key(source_spec({"-DA=1", "-DB=2"}, {a, {"b.cuh", sha256("b")}}, {"f"}), src, fp), base);
  EXPECT_NE(compute_key(source_spec({"-DA=1"}, {a, b}, {"f"}), src, fp), base);
  EXPECT_NE(compute_key(source_spec({"-DA=1", "-DB=2"}, {a, b}, {}), src, fp), base);
  // The shared fast-math flag is NVRTC's --use_fast_math: one key either way.
  JobSpec flag;
  flag.format = InputFormat::cuda_cpp;
  flag.options.fast_math = true;
  ASSERT_TRUE(canonicalize(flag, "x86_64-pc-linux-gnu"));
  EXPECT_EQ(compute_key(flag, src, fp), compute_key(source_spec({"-use_fast_math"}), src, fp));
  // The same bytes as LLVM IR are another job.
  JobSpec ir;
  ASSERT_TRUE(canonicalize(ir, "x86_64-pc-linux-gnu"));
  EXPECT_NE(compute_key(ir, src, fp), compute_key(source_spec(), src, fp));
}

TEST(SourceKey, ASourceJobIsDeviceCodeWithOneSourceAndSafeHeaderNames) {
  auto refused = [](JobSpec spec) {
    auto ok = canonicalize(spec, "x86_64-pc-linux-gnu");
    return ok ? std::string("accepted") : ok.error().message;
  };
  JobSpec host;
  host.format = InputFormat::cuda_cpp;
  host.side = Side::host;
  EXPECT_NE(refused(host).find("device code"), std::string::npos);
  JobSpec linked;
  linked.format = InputFormat::cuda_cpp;
  linked.linked_formats = {InputFormat::cuda_cpp};
  EXPECT_NE(refused(linked).find("one source"), std::string::npos);
  for (const char* name : {"/etc/passwd", "../up.cuh", "a/../../b.cuh", "a/..", ""}) {
    JobSpec bad;
    bad.format = InputFormat::cuda_cpp;
    bad.source.headers = {{name, sha256("x")}};
    EXPECT_NE(refused(bad).find("is not one an #include may spell"), std::string::npos) << name;
  }
  JobSpec twice;
  twice.format = InputFormat::cuda_cpp;
  twice.source.headers = {{"a.cuh", sha256("1")}, {"a.cuh", sha256("2")}};
  EXPECT_NE(refused(twice).find("two headers are named"), std::string::npos);
  JobSpec ir;
  ir.source.nvrtc_options = {"-DA"};
  EXPECT_NE(refused(ir).find("belong to CUDA C++ jobs"), std::string::npos);
  JobSpec ltoir_from_ir;
  ASSERT_TRUE(canonicalize(ltoir_from_ir, "x86_64-pc-linux-gnu"));
  EXPECT_FALSE(plan_images(ltoir_from_ir, {"sm_90"}, {ImageKind::ltoir}));
  EXPECT_TRUE(plan_images(source_spec(), {"sm_90"}, {ImageKind::ltoir}));
}

TEST(IncludeDirectives, CommentsSplicesAndDigraphsAreSeenThrough) {
  auto found = include_directives(
      "#include \"a.cuh\"\n"
      "  #  include <cuda_fp16.h>  // toolkit\n"
      "#/* c */include \"b.cuh\"\n"
      "%:include \"c.cuh\"\n"
      "#inc\\\nlude \"d.cuh\"\n"
      "// #include \"commented.cuh\"\n"
      "/* #include \"block.cuh\"\n#include \"still.cuh\" */\n"
      "const char* s = \"#include \\\"in-string.cuh\\\"\";\n"
      "#include MACRO\n"
      "#if __has_include(<opt.h>)\n#endif\n"
      "#include_next <next.h>\n");
  std::vector<std::string> names;
  for (const IncludeDirective& d : found) names.push_back((d.computed ? "?" : d.name) + (d.angled ? "<>" : ""));
  EXPECT_EQ(names, (std::vector<std::string>{"a.cuh", "cuda_fp16.h<>", "b.cuh", "c.cuh", "d.cuh", "?", "opt.h<>",
                                             "next.h<>"}));
  EXPECT_TRUE(found[6].has_include);
  EXPECT_TRUE(include_reaches_out("/etc/passwd"));
  EXPECT_TRUE(include_reaches_out("a/../../b"));
  EXPECT_TRUE(include_reaches_out("..\\b"));
  EXPECT_FALSE(include_reaches_out("a/..b/c.h"));
  EXPECT_FALSE(include_reaches_out("cooperative_groups/details/info.h"));
}

TEST(CollectHeaders, FollowsQuotedIncludesBesideTheIncluderThenTheIncludeFoldersTransitively) {
  TempDir dir;
  auto write = [&](const std::string& rel, const std::string& text) {
    std::filesystem::create_directories((dir.path() / rel).parent_path());
    std::ofstream(dir.path() / rel) << text;
  };
  write("src/k.cu", "#include \"local.cuh\"\n#include <lib/api.cuh>\n#include <cuda_fp16.h>\n");
  write("src/local.cuh", "#pragma once\n");
  write("inc/lib/api.cuh", "#include \"detail/impl.cuh\"\n");
  write("inc/lib/detail/impl.cuh", "#include \"../../other/x.cuh\"\n");
  auto refused = collect_headers("#include \"local.cuh\"\n#include <lib/api.cuh>\n", dir.path() / "src",
                                 {dir.path() / "inc"});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("through '..'"), std::string::npos) << refused.error().message;

  write("inc/lib/detail/impl.cuh", "#include \"local.cuh\"\n");  // "local.cuh" again: found as src/local.cuh? no:
  write("inc/lib/detail/local.cuh", "different\n");               // beside impl.cuh first, a different file
  auto conflict = collect_headers("#include \"local.cuh\"\n#include <lib/api.cuh>\n", dir.path() / "src",
                                  {dir.path() / "inc"});
  ASSERT_FALSE(conflict);
  EXPECT_NE(conflict.error().message.find("one name can stand for one file only"), std::string::npos)
      << conflict.error().message;

  write("inc/lib/detail/impl.cuh", "#pragma once\n");
  auto ok = collect_headers("#include \"local.cuh\"\n#include <lib/api.cuh>\n#include <cuda_fp16.h>\n",
                            dir.path() / "src", {dir.path() / "inc"});
  ASSERT_TRUE(ok) << ok.error().message;
  std::vector<std::string> names;
  for (const CollectedHeader& h : *ok) names.push_back(h.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"detail/impl.cuh", "lib/api.cuh", "local.cuh"}));  // not cuda_fp16.h
}

TEST(LoweredNames, TravelInTheImageMetadataAndOlderRecordsStillDecode) {
  server::ImageMeta meta;
  meta.kind = ImageKind::ltoir;
  meta.size = 3;
  meta.sha256 = sha256("abc");
  std::string plain = server::records::encode_meta(meta);
  meta.lowered_names = {{"scale<float>", "_Z5scaleIfEvPT_S0_"}, {"g", "g"}};
  std::string named = server::records::encode_meta(meta);
  auto back = server::records::decode_meta(named, "sm_90");
  ASSERT_TRUE(back);
  EXPECT_EQ(back->kind, ImageKind::ltoir);
  EXPECT_EQ(back->lowered_names, meta.lowered_names);
  auto old = server::records::decode_meta(plain, "sm_90");
  ASSERT_TRUE(old);
  EXPECT_TRUE(old->lowered_names.empty());
  EXPECT_FALSE(server::records::decode_meta(named.substr(0, named.size() - 1), "sm_90"));
  EXPECT_FALSE(server::records::decode_meta(plain + std::string(2, '\0'), "sm_90")) << "an empty section";
}

}  // namespace
}  // namespace kcache::test
