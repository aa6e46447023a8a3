// CUDA C++ source jobs (format cu) through a real kcached and the toolkit's NVRTC: templates,
// headers in nested folders, toolkit headers, name expressions, and every way a source job can be
// wrong. Skipped, saying why, where the toolkit or its NVRTC is absent.
#include <filesystem>

#include <nlohmann/json.hpp>

#include "daemon_fixture.hpp"
#include "kcache/source_headers.hpp"

namespace kcache::test {
namespace {

const std::filesystem::path k_nvrtc = "/usr/local/cuda/lib64/libnvrtc.so";

std::filesystem::path source_dir() { return std::filesystem::path(KCACHE_TEST_DATA_DIR) / "cuda_src"; }

// A source job for `source` with the headers the client finds through `include/`, as
// `kcache compile FILE.cu -I include` sends it.
v1::CompileRequest source_request(const std::string& source, const std::vector<std::string>& archs,
                                  std::vector<v1::ImageKind> emit, std::vector<std::string> options = {},
                                  std::vector<std::string> names = {}) {
  v1::CompileRequest r;
  r.set_side(v1::SIDE_DEVICE);
  r.set_format(v1::FORMAT_CUDA_CPP);
  r.set_module(source);
  for (const std::string& a : archs) r.add_archs(a);
  for (v1::ImageKind k : emit) r.add_emit(k);
  for (const std::string& o : options) r.add_nvrtc_options(o);
  for (const std::string& n : names) r.add_name_expressions(n);
  auto headers = collect_headers(source, source_dir(), {source_dir() / "include"});
  EXPECT_TRUE(headers) << headers.error().message;
  if (headers) {
    for (const CollectedHeader& h : *headers) {
      v1::SourceHeader* out = r.add_headers();
      out->set_name(h.name);
      out->set_content(h.bytes);
    }
  }
  return r;
}

class Source : public DaemonTest {
 protected:
  void SetUp() override {
    if (ptxas_path().empty()) GTEST_SKIP() << "no CUDA toolkit: /usr/local/cuda/bin/ptxas is absent";
    if (!std::filesystem::exists(k_nvrtc)) GTEST_SKIP() << "the toolkit has no NVRTC: " << k_nvrtc << " is absent";
    DaemonTest::SetUp();
    m_reduce = read_test_data("cuda_src/reduce.cu");
  }

  void expect_refused(const v1::CompileRequest& request, ErrorCode code, const std::string& message) {
    auto r = m_client->compile(request);
    ASSERT_FALSE(r) << "accepted: " << message;
    EXPECT_EQ(r.error().code, code) << error_code_name(r.error().code) << ": " << r.error().message;
    EXPECT_NE(r.error().message.find(message), std::string::npos) << r.error().message;
  }

  std::string m_reduce;
  const std::vector<std::string> m_names = {"block_reduce<float, 256, ops::Sum<float>>",
                                            "block_reduce<__half, 128, ops::Max<__half>>", "scale_half"};
};

TEST_F(Source, TemplatesWithNestedAndToolkitHeadersCompileThenHitWithTheirLoweredNames) {
  auto request = source_request(m_reduce, {"sm_80", "sm_90"}, {v1::KIND_PTX, v1::KIND_CUBIN, v1::KIND_LTOIR},
                                {"-std=c++17", "-DITEMS_PER_THREAD=4"}, m_names);
  ASSERT_EQ(request.headers_size(), 2);  // ops/functors.cuh and, beside it, detail/vec.cuh
  EXPECT_EQ(request.headers(0).name(), "ops/functors.cuh");
  EXPECT_EQ(request.headers(1).name(), "detail/vec.cuh");
  auto first = m_client->compile(request);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->outcome(), v1::OUTCOME_MISS);
  ASSERT_EQ(first->images_size(), 6);
  for (const v1::Image& image : first->images()) {
    ASSERT_EQ(image.lowered_names_size(), 3) << image.arch();
    for (const v1::LoweredName& n : image.lowered_names()) {
      EXPECT_EQ(n.lowered().substr(0, 2), "_Z") << n.expression();
      if (image.kind() != v1::KIND_PTX) continue;
      // Each lowered name is a kernel of the PTX.
      EXPECT_NE(image.data().find(".entry " + n.lowered()), std::string::npos) << n.lowered();
    }
    if (image.kind() == v1::KIND_PTX) { EXPECT_NE(image.data().find(".target " + image.arch()), std::string::npos); }
    if (image.kind() == v1::KIND_CUBIN) {
      EXPECT_EQ(image.data().substr(0, 4), "\x7f" "ELF");
      // ptxas's report through NVRTC: every kernel with its registers (the reduction's shared
      // memory is dynamic, sized at launch, so none is static).
      ASSERT_GE(image.kernels_size(), 3) << image.arch();
      for (const v1::KernelInfo& k : image.kernels()) EXPECT_GT(k.registers(), 0u) << k.name();
    }
    if (image.kind() == v1::KIND_LTOIR) { EXPECT_GT(image.size(), 0u); }
  }
  EXPECT_EQ(first->images(0).lowered_names(0).expression(), "block_reduce<__half, 128, ops::Max<__half>>");

  auto second = m_client->compile(request);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(second->outcome(), v1::OUTCOME_HIT);
  EXPECT_EQ(second->key(), first->key());
  for (int i = 0; i < first->images_size(); ++i) {
    EXPECT_EQ(second->images(i).sha256(), first->images(i).sha256());
    EXPECT_EQ(second->images(i).lowered_names_size(), 3);
    EXPECT_EQ(second->images(i).kernels_size(), first->images(i).kernels_size());
  }
  for (const std::string& d : first->diagnostics()) EXPECT_EQ(d.find("ptxas info"), std::string::npos) << d;
  // Lowered names live in the store with the images: they survive a restart.
  restart();
  auto third = m_client->compile(request);
  ASSERT_TRUE(third) << third.error().message;
  EXPECT_EQ(third->outcome(), v1::OUTCOME_HIT);
  EXPECT_EQ(third->images(2).lowered_names(2).expression(), "scale_half");
  EXPECT_EQ(third->images(2).lowered_names(2).lowered(), first->images(2).lowered_names(2).lowered());

  // A source job is a device job: nothing of it lands in the host family.
  v1::LookupRequest host;
  host.set_side(v1::SIDE_HOST);
  host.add_keys(first->key());
  auto found = m_client->lookup(host);
  ASSERT_TRUE(found) << found.error().message;
  ASSERT_EQ(found->results_size(), 1);
  EXPECT_FALSE(found->results(0).found());
}

TEST_F(Source, OneChangedHeaderIsANewKeyAndEquivalentOptionSpellingsAreOne) {
  auto base = source_request(m_reduce, {"sm_90"}, {v1::KIND_PTX}, {"-std=c++17", "-DITEMS_PER_THREAD=2", "-DX=1"});
  auto first = m_client->compile(base);
  ASSERT_TRUE(first) << first.error().message;
  // The same job spelt otherwise: other option spellings and order, the same headers reordered.
  auto same = source_request(m_reduce, {"sm_90"}, {v1::KIND_PTX},
                             {"--define-macro=X=1", "--std=c++17", "-D", "ITEMS_PER_THREAD=2"});
  std::swap(*same.mutable_headers(0), *same.mutable_headers(1));
  auto again = m_client->compile(same);
  ASSERT_TRUE(again) << again.error().message;
  EXPECT_EQ(again->outcome(), v1::OUTCOME_HIT);
  EXPECT_EQ(again->key(), first->key());

  v1::CompileRequest changed = base;
  changed.mutable_headers(1)->mutable_content()->append("\n// a comment changes the header\n");
  auto other = m_client->compile(changed);
  ASSERT_TRUE(other) << other.error().message;
  EXPECT_EQ(other->outcome(), v1::OUTCOME_MISS);
  EXPECT_NE(other->key(), first->key());
  // For one macro the last -D or -U decides: a different final value is a different key.
  auto redefined = m_client->compile(
      source_request(m_reduce, {"sm_90"}, {v1::KIND_PTX}, {"-std=c++17", "-DITEMS_PER_THREAD=2", "-DX=1", "-UX"}));
  ASSERT_TRUE(redefined) << redefined.error().message;
  EXPECT_NE(redefined->key(), first->key());
}

TEST_F(Source, ASyntaxErrorComesBackWithNvrtcsLog) {
  auto r = m_client->compile(source_request("__global__ void f(int* x) { x[0] = 1 }\n", {"sm_90"}, {v1::KIND_PTX}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::k_invalid_argument);
  EXPECT_NE(r.error().message.find("NVRTC could not compile"), std::string::npos) << r.error().message;
  bool has_line = false;
  for (const std::string& line : r.error().details) has_line = has_line || line.find("expected a \";\"") != std::string::npos;
  EXPECT_TRUE(has_line) << "NVRTC's log is not in the report's diagnostics";
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->entries(), 0u);
}

TEST_F(Source, AMissingHeaderIsNamed) {
  expect_refused(source_request("#include \"not/here.cuh\"\n__global__ void f() {}\n", {"sm_90"}, {v1::KIND_PTX}),
                 ErrorCode::k_invalid_argument, "the source includes \"not/here.cuh\", which the job did not carry");
}

TEST_F(Source, OptionsAndIncludesThatReachIntoTheDaemonAreRefused) {
  const std::string ok = "__global__ void f() {}\n";
  expect_refused(source_request(ok, {"sm_90"}, {v1::KIND_PTX}, {"-I/etc"}), ErrorCode::k_invalid_argument,
                 "NVRTC option '-I/etc': it reads files on the daemon");
  expect_refused(source_request(ok, {"sm_90"}, {v1::KIND_PTX}, {"--pre-include=/etc/passwd"}),
                 ErrorCode::k_invalid_argument, "it reads files on the daemon");
  expect_refused(source_request(ok, {"sm_90"}, {v1::KIND_PTX}, {"--pch"}), ErrorCode::k_invalid_argument,
                 "it reads files on the daemon");
  expect_refused(source_request(ok, {"sm_90"}, {v1::KIND_PTX}, {"-arch=sm_80"}), ErrorCode::k_invalid_argument,
                 "the arch comes from the job");
  expect_refused(source_request(ok, {"sm_90"}, {v1::KIND_PTX}, {"--keep"}), ErrorCode::k_invalid_argument,
                 "not on kcache's allow-list");
  // The client refuses to collect them; sent anyway, the daemon refuses them too.
  v1::CompileRequest absolute = source_request(ok, {"sm_90"}, {v1::KIND_PTX});
  absolute.set_module("#include \"/etc/passwd\"\n" + ok);
  expect_refused(absolute, ErrorCode::k_invalid_argument, "names a file by an absolute path or through '..'");
  absolute.set_module("#  /* hidden */ include <../../../etc/passwd>\n" + ok);
  expect_refused(absolute, ErrorCode::k_invalid_argument, "through '..'");
  absolute.set_module("#define F \"/etc/passwd\"\n#include F\n" + ok);
  expect_refused(absolute, ErrorCode::k_invalid_argument, "computed include");
  v1::CompileRequest bad_header = source_request(ok, {"sm_90"}, {v1::KIND_PTX});
  v1::SourceHeader* h = bad_header.add_headers();
  h->set_name("../up.cuh");
  expect_refused(bad_header, ErrorCode::k_invalid_argument, "header name '../up.cuh'");
  // And the wall: a source job is device code.
  v1::CompileRequest host = source_request(ok, {}, {});
  host.set_side(v1::SIDE_HOST);
  expect_refused(host, ErrorCode::k_invalid_argument, "CUDA C++ (format cu) is device code");
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->entries(), 0u);
  EXPECT_TRUE(m_client->compile(source_request(ok, {"sm_90"}, {v1::KIND_PTX}))) << "kcached stopped serving";
}

TEST_F(Source, TheCliCompilesKeysAndPrecompilesASourceWithItsIncludeFolders) {
  const std::string src = (source_dir() / "reduce.cu").string(), inc = (source_dir() / "include").string();
  const std::filesystem::path out = m_dir.path() / "out";
  std::vector<std::string> args = {"--json", "compile", src, "-I", inc, "-D", "ITEMS_PER_THREAD=2", "--std", "c++17",
                                   "--arch", "sm_90", "--emit", "cubin,ltoir", "--name-expr", "scale_half",
                                   "--out-dir", out.string()};
  auto first = run_cli(args, m_daemon->address());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  auto j = nlohmann::json::parse(first.out);
  EXPECT_EQ(j["outcome"], "miss");
  ASSERT_EQ(j["images"].size(), 2u);
  EXPECT_EQ(j["images"][1]["kind"], "ltoir");
  EXPECT_EQ(read_file(out / "sm_90.ltoir").size(), j["images"][1]["size"].get<std::size_t>());
  EXPECT_TRUE(j["images"][0]["lowered_names"]["scale_half"].get<std::string>().starts_with("_Z"));
  // `kcache key` collects the same headers: the same key, without compiling.
  auto key = run_cli({"key", src, "-I", inc, "--std=c++17", "-DITEMS_PER_THREAD=2", "--name-expr", "scale_half"},
                     m_daemon->address());
  ASSERT_EQ(key.exit_code, 0) << key.err;
  EXPECT_EQ(key.out.substr(0, 64), j["key"].get<std::string>());
  // Options before the file take one value each (the file is not taken for a macro), and -D and
  // -U count in the order given, as NVRTC applies them: -U then -D defines the macro.
  auto first_options = run_cli({"key", "-I", inc, "--std", "c++17", "-U", "ITEMS_PER_THREAD", "-D", "ITEMS_PER_THREAD=2",
                                "--name-expr", "scale_half", src},
                               m_daemon->address());
  ASSERT_EQ(first_options.exit_code, 0) << first_options.err;
  EXPECT_EQ(first_options.out.substr(0, 64), j["key"].get<std::string>());
  auto undefined_last = run_cli({"key", "-I", inc, "--std", "c++17", "-D", "ITEMS_PER_THREAD=2", "-U", "ITEMS_PER_THREAD",
                                 "--name-expr", "scale_half", src},
                                m_daemon->address());
  ASSERT_EQ(undefined_last.exit_code, 0) << undefined_last.err;
  EXPECT_NE(undefined_last.out.substr(0, 64), j["key"].get<std::string>()) << "-U last leaves the macro undefined";
  // Without -I the client finds no ops/functors.cuh to send, and the daemon names it.
  auto unfound = run_cli({"compile", src, "--arch", "sm_90"}, m_daemon->address());
  EXPECT_EQ(unfound.exit_code, 3) << unfound.out;
  EXPECT_NE(unfound.err.find("\"ops/functors.cuh\", which the job did not carry"), std::string::npos) << unfound.err;
  // A hit without name expressions is answered over HTTP by `kcache` alone.
  std::vector<std::string> plain = {"compile", src, "-I", inc, "--arch", "sm_90", "--emit", "cubin"};
  ASSERT_EQ(run_cli(plain, m_daemon->address()).exit_code, 0);
  auto hit = run_cli(plain, m_daemon->address());
  ASSERT_EQ(hit.exit_code, 0) << hit.err;
  EXPECT_TRUE(hit.out.starts_with("hit ")) << hit.out;

  // A manifest's CUDA C++ module, its include folder relative to the manifest.
  std::filesystem::path manifest = source_dir() / "precompile.toml";
  std::filesystem::path bundle = m_dir.path() / "bundle";
  auto pre = run_cli({"precompile", manifest.string(), "--out", bundle.string()}, m_daemon->address());
  ASSERT_EQ(pre.exit_code, 0) << pre.err;
  auto index = nlohmann::json::parse(read_file(bundle / "index.json"));
  ASSERT_EQ(index["entries"].size(), 1u);
  EXPECT_EQ(index["entries"][0]["key"], j["key"]) << "the manifest states the same job";
  auto names = index["entries"][0]["images"][0]["lowered_names"];
  EXPECT_EQ(names["scale_half"], j["images"][0]["lowered_names"]["scale_half"]);
}

class SourceTimeout : public Source {
 protected:
  std::vector<std::string> daemon_args() const override { return {"--job-timeout", "1"}; }
};

TEST_F(SourceTimeout, ACompileThatRunsPastTheJobTimeoutIsStopped) {
  // 2^22 distinct class instantiations: NVRTC's front end takes far longer than the 1 s limit.
  const std::string slow =
      "template <int N, int M> struct Tree { static constexpr long v = Tree<N - 1, 2 * M>::v + Tree<N - 1, 2 * M + 1>::v; };\n"
      "template <int M> struct Tree<0, M> { static constexpr long v = M; };\n"
      "__global__ void f(long* out) { *out = Tree<22, 0>::v; }\n";
  expect_refused(source_request(slow, {"sm_90"}, {v1::KIND_PTX}), ErrorCode::k_deadline_exceeded,
                 "ran past its time limit (--job-timeout)");
  auto stats = m_client->stats();
  ASSERT_TRUE(stats);
  EXPECT_EQ(stats->entries(), 0u);
}

}  // namespace
}  // namespace kcache::test
