// The compiler launcher's planners, with no toolkit: the option tables (launcher/options.hpp),
// the one rule for sources, the recognition of compilers, and the planners of nvcc's and clang's
// own plans, run on plans recorded from the real compilers (tests/data/launcher/plans: 52
// `nvcc --dryrun` and 21 `clang++-22 -###` outputs, in the shapes CMake, Make, Bazel's
// rules_cuda, PyTorch's extensions, CUTLASS and meson emit; record.sh made them).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "launcher/clang_plan.hpp"
#include "launcher/direct.hpp"
#include "launcher/nvcc_plan.hpp"
#include "launcher/options.hpp"
#include "launcher/plan_runner.hpp"
#include "test_paths.hpp"

namespace kcache::launcher {
namespace {

namespace fs = std::filesystem;
using Words = std::vector<std::string>;

// How a table reads one command line: each Arg as "spelling=value" (an option), "?spelling" (one
// the table lacks) or "<word>" (an input).
std::vector<std::string> shown(const OptionTable& table, const Words& words) {
  std::vector<std::string> out;
  for (const Arg& a : read_args(table, words)) {
    if (a.is_input()) out.push_back("<" + words[a.index] + ">");
    else if (a.unknown) out.push_back("?" + a.spelling);
    else out.push_back(a.spelling + (a.value.empty() ? "" : "=" + a.value));
  }
  return out;
}

TEST(OptionTables, NvccSpellsAValueFourWays) {
  EXPECT_EQ(shown(nvcc_options(), {"-arch=sm_80", "-arch", "sm_90", "--gpu-architecture=sm_75", "--gpu-architecture", "sm_70"}),
            Words({"-arch=sm_80", "-arch=sm_90", "--gpu-architecture=sm_75", "--gpu-architecture=sm_70"}));
}

TEST(OptionTables, NvccJoinsOnlyItsOneLetterPathAndMacroOptions) {
  EXPECT_EQ(shown(nvcc_options(), {"-Iinc", "-I", "inc2", "-I=inc3", "-DX=1", "-O3", "-lcudart", "-lineinfo"}),
            Words({"-I=inc", "-I=inc2", "-I=inc3", "-D=X=1", "-O=3", "-l=cudart", "-lineinfo"}));
}

TEST(OptionTables, NvccsHostCompilerOptionsTakeTheirValueAlong) {
  // -Xcompiler -c must not read as a compile, nor -Xptxas -v as nvcc's -v.
  EXPECT_EQ(shown(nvcc_options(), {"-Xcompiler", "-c", "-Xptxas", "-v", "-Xcompiler=-fPIC,-O2", "--compiler-options", "-fPIC -Wall"}),
            Words({"-Xcompiler=-c", "-Xptxas=-v", "-Xcompiler=-fPIC,-O2", "--compiler-options=-fPIC -Wall"}));
  EXPECT_EQ(nvcc_invocation({"-Xcompiler", "-c", "k.cu"}).unchanged, "not a compile (linking)");
  EXPECT_EQ(nvcc_invocation({"-Xptxas", "-v", "-c", "k.cu"}).per_source.size(), 1u);
}

TEST(OptionTables, NvccReadsUnknownOptionsAsTakingNoValue) {
  EXPECT_EQ(shown(nvcc_options(), {"-forward-unknown-to-host-compiler", "-Wall", "-fPIC", "k.cu"}),
            Words({"-forward-unknown-to-host-compiler", "?-Wall", "?-fPIC", "<k.cu>"}));
}

TEST(OptionTables, NvccsOutputAndLanguage) {
  EXPECT_EQ(shown(nvcc_options(), {"-o", "k.o", "--output-file=l.o", "-x", "cu", "--x=cu", "-c", "k.cpp"}),
            Words({"-o=k.o", "--output-file=l.o", "-x=cu", "--x=cu", "-c", "<k.cpp>"}));
}

TEST(OptionTables, NvccDependencyOptions) {
  Words args = {"-MD", "-MT", "obj/k.o", "-MF", "obj/k.o.d", "-MP", "-c", "k.cu"};
  EXPECT_EQ(shown(nvcc_options(), args), Words({"-MD", "-MT=obj/k.o", "-MF=obj/k.o.d", "-MP", "-c", "<k.cu>"}));
  DependencyOptions d = dependency_options(nvcc_options(), args);
  EXPECT_EQ(d.target, "obj/k.o");
  EXPECT_EQ(d.file, "obj/k.o.d");
  EXPECT_TRUE(d.phony);
  DependencyOptions spelled_long = dependency_options(
      nvcc_options(), {"--dependency-target-name=t", "--dependency-output", "f.d", "--generate-dependency-targets"});
  EXPECT_EQ(spelled_long.target, "t");
  EXPECT_EQ(spelled_long.file, "f.d");
  EXPECT_TRUE(spelled_long.phony);
}

TEST(OptionTables, EveryNvccOptionHasOneEntry) {
  // -MF is listed in nvcc --help without its <file>; it takes one.
  EXPECT_EQ(shown(nvcc_options(), {"-MF", "k.d", "--dependency-output=l.d"}), Words({"-MF=k.d", "--dependency-output=l.d"}));
  // Spellings never repeat, so no option can be read two ways.
  std::map<std::string_view, int> seen;
  for (const OptionSpec& o : nvcc_options().options) {
    ++seen[o.name];
    if (!o.alias.empty()) ++seen[o.alias];
  }
  for (const auto& [spelling, count] : seen) EXPECT_EQ(count, 1) << spelling;
  EXPECT_GE(nvcc_options().options.size(), 140u) << "every option of nvcc --help";
}

TEST(OptionTables, ClangJoinsOrSeparates) {
  EXPECT_EQ(shown(clang_options(), {"-ok.o", "-o", "l.o", "-xcuda", "-x", "cuda", "-MFk.d", "-MF", "l.d", "-Iinc", "-I", "j"}),
            Words({"-o=k.o", "-o=l.o", "-x=cuda", "-x=cuda", "-MF=k.d", "-MF=l.d", "-I=inc", "-I=j"}));
}

TEST(OptionTables, ClangValuesAreNeverSources) {
  EXPECT_EQ(shown(clang_options(), {"-Xclang", "-fno-pch-timestamp", "-isystem-after", "dir", "-mllvm", "-x", "k.cu"}),
            Words({"-Xclang=-fno-pch-timestamp", "-isystem-after=dir", "-mllvm=-x", "<k.cu>"}));
}

TEST(OptionTables, ClangsDebugOptions) {
  for (const char* debug : {"-g", "-ggdb", "-gline-tables-only", "-g3", "-gsplit-dwarf"}) {
    EXPECT_EQ(clang_invocation({"-x", "cuda", debug, "-c", "k.cu"}).unchanged, "option -g (clang)") << debug;
  }
  EXPECT_TRUE(clang_invocation({"-x", "cuda", "-g0", "-c", "k.cu"}).unchanged.empty());
}

TEST(OptionTables, ClangsOtherModes) {
  for (const char* mode : {"-E", "-S", "-M", "-fsyntax-only", "--cuda-device-only", "-emit-llvm", "-###", "-flto"}) {
    EXPECT_EQ(clang_invocation({mode, "-c", "k.cu"}).unchanged, std::string("option ") + mode + " (clang)");
  }
  EXPECT_EQ(clang_invocation({"-flto=thin", "-c", "k.cu"}).unchanged, "option -flto= (clang)");
  EXPECT_EQ(clang_invocation({"-save-temps=obj", "-c", "k.cu"}).unchanged, "option -save-temps (clang)");
  EXPECT_EQ(clang_invocation({"-print-file-name=libc.so"}).unchanged, "option -print- (clang)");
}

TEST(OptionTables, AHostCompilersPreprocessorOptions) {
  Words args = {"-D__CUDA_ARCH__=800", "-I", "inc", "-isystem", "/cuda/include", "-include", "cuda_runtime.h",
                "-Wp,-MD,x.d", "-O2", "-fPIC", "-c", "x.cpp", "-o", "x.o"};
  std::vector<std::string> kept;
  for (const Arg& a : read_args(host_compiler_options(), args)) {
    if (!a.affects(k_preprocessor)) kept.push_back(args[a.index]);
  }
  EXPECT_EQ(kept, Words({"-O2", "-fPIC", "-c", "x.cpp", "-o"}));
  EXPECT_EQ(object_path(host_compiler_options(), args), "x.o");
  EXPECT_FALSE(first_with(host_compiler_options(), {"-gno-record-gcc-switches", "-g0"}, k_debug_info));
  EXPECT_EQ(first_with(host_compiler_options(), {"-O2", "-ggdb"}, k_debug_info), "-g");
}

TEST(OptionTables, Cc1sPreprocessorOptions) {
  Words args = {"-internal-isystem", "/usr/include", "-I", "inc", "-Iinc2", "-D", "X", "-fdebug-compilation-dir=/b",
                "-O3", "-dependency-file", "k.d", "-MT", "k.o", "-sys-header-deps", "-x", "cuda", "k.cu"};
  std::vector<std::string> kept;
  for (const Arg& a : read_args(cc1_options(), args)) {
    if (!a.affects(k_preprocessor)) kept.insert(kept.end(), args.begin() + a.index, args.begin() + a.index + a.count);
  }
  EXPECT_EQ(kept, Words({"-O3", "-x", "cuda", "k.cu"}));
}

TEST(Compilers, EachNameIsRecognisedOneWay) {
  const std::vector<std::pair<std::string, CompilerKind>> names = {
      {"nvcc", CompilerKind::nvcc},
      {"/usr/local/cuda/bin/nvcc", CompilerKind::nvcc},
      {"gcc", CompilerKind::gcc},
      {"g++", CompilerKind::gcc},
      {"cc", CompilerKind::gcc},
      {"c++", CompilerKind::gcc},
      {"gcc-12", CompilerKind::gcc},
      {"g++-12", CompilerKind::gcc},
      {"/usr/bin/g++-12", CompilerKind::gcc},
      {"aarch64-linux-gnu-g++", CompilerKind::gcc},
      {"x86_64-linux-gnu-gcc-12", CompilerKind::gcc},
      {"clang", CompilerKind::clang},
      {"clang++", CompilerKind::clang},
      {"clang++-22", CompilerKind::clang},
      {"/usr/lib/llvm-22/bin/clang++", CompilerKind::clang},
      {"aarch64-linux-gnu-clang++", CompilerKind::clang},
      {"clang-22.1", CompilerKind::clang},
      {"kcache", CompilerKind::none},
      {"compile", CompilerKind::none},
      {"stats", CompilerKind::none},
      {"ptxas", CompilerKind::none},
      {"clang-format", CompilerKind::none},
      {"gcc-ar", CompilerKind::none},
      {"cudafe++", CompilerKind::none},
  };
  for (const auto& [name, kind] : names) EXPECT_EQ(compiler_kind(name), kind) << name;
  EXPECT_TRUE(is_host_compiler("g++-12"));
  EXPECT_FALSE(is_host_compiler("nvcc"));
}

TEST(OneRule, EachSourceGetsItsOwnObject) {
  Invocation two = nvcc_invocation({"-arch=sm_80", "-c", "a.cu", "src/b.cu"});
  ASSERT_TRUE(two.unchanged.empty()) << two.unchanged;
  ASSERT_EQ(two.per_source.size(), 2u);
  EXPECT_EQ(two.per_source[0], Words({"-arch=sm_80", "-c", "a.cu", "-o", "a.o"}));
  EXPECT_EQ(two.per_source[1], Words({"-arch=sm_80", "-c", "src/b.cu", "-o", "b.o"})) << "in the current folder, as nvcc";
  Invocation clang_two = clang_invocation({"-x", "cuda", "--cuda-gpu-arch=sm_80", "-c", "a.cu", "b.cu"});
  ASSERT_EQ(clang_two.per_source.size(), 2u);
  EXPECT_EQ(clang_two.per_source[1], Words({"-x", "cuda", "--cuda-gpu-arch=sm_80", "-c", "b.cu", "-o", "b.o"}));
}

TEST(OneRule, WhatCannotBeSplitRunsUnchanged) {
  EXPECT_EQ(nvcc_invocation({"-c", "a.cu", "b.cu", "-o", "x.o"}).unchanged, "several sources with -o");
  EXPECT_EQ(nvcc_invocation({"-c", "a.cu", "b.cu", "-MD", "-MF", "x.d"}).unchanged, "several sources with one dependency file");
  EXPECT_EQ(nvcc_invocation({"-c"}).unchanged, "no source");
  EXPECT_EQ(nvcc_invocation({"a.o", "b.o", "-o", "app"}).unchanged, "not a compile (linking)");
  EXPECT_EQ(nvcc_invocation({"-E", "k.cu"}).unchanged, "option -E");
  EXPECT_EQ(nvcc_invocation({"--preprocess", "k.cu"}).unchanged, "option --preprocess");
  EXPECT_EQ(nvcc_invocation({"-ptx", "-c", "k.cu"}).unchanged, "option -ptx");
  EXPECT_EQ(nvcc_invocation({"-c", "k.cu", "--keep-dir", "d"}).unchanged, "option --keep-dir");
  EXPECT_EQ(clang_invocation({"-x", "cuda", "-c", "a.cu", "b.cu", "-o", "x.o"}).unchanged, "several sources with -o (clang)");
  Invocation one = nvcc_invocation({"-o", "k.o", "-c", "k.cu"});
  ASSERT_EQ(one.per_source.size(), 1u);
  EXPECT_EQ(one.per_source[0], Words({"-o", "k.o", "-c", "k.cu"})) << "one source: the line itself";
}

TEST(OneRule, TheObjectIsTheCompilersName) {
  EXPECT_EQ(object_path(nvcc_options(), {"-c", "dir/k.cu"}), "k.o");
  EXPECT_EQ(object_path(nvcc_options(), {"-c", "k.cu", "--output-file", "o/x.o"}), "o/x.o");
  EXPECT_EQ(object_path(clang_options(), {"-c", "k.cu", "-oout.o"}), "out.o");
  EXPECT_EQ(object_path(nvcc_options(), {"-c", "-x", "cu", "k.cpp"}), "k.o");
}

TEST(NvccPlan, TemporaryNamesAreFixed) {
  EXPECT_EQ(fixed_temporary_names("/t/tmpxft_0000a1b2_00000003-6_a.ptx"), "/t/tmpxft_00000000_00000000-6_a.ptx");
  EXPECT_EQ(fixed_temporary_names("--x=tmpxft_0000a1b2_00000000-1_a.ii,tmpxft_0000a1b2_00000001-2_b.ii"),
            "--x=tmpxft_00000000_00000000-1_a.ii,tmpxft_00000000_00000000-2_b.ii");
  EXPECT_EQ(fixed_temporary_names("tmpxft_short"), "tmpxft_short");
}

TEST(NvccPlan, RemovesOneUnquotedFileWithSpaces) {
  std::map<std::string, std::string> vars;
  auto steps = parse_plan("#$ rm /t/tmpxft_00000000_00000000-3_k s.fatbin\n", vars);
  ASSERT_TRUE(steps) << steps.error().message;
  ASSERT_EQ(steps->size(), 1u);
  EXPECT_EQ((*steps)[0].argv, Words({"/t/tmpxft_00000000_00000000-3_k s.fatbin"})) << "not /t/..._k and ./s.fatbin";
}

TEST(NvccPlan, LineMarkersAreJoinedToTheBuildsFolderAndBack) {
  const std::string text = "# 0 \"k.cu\"\n# 0 \"<built-in>\"\n# 1 \"/usr/include/stdio.h\" 1 3\n# 1 \"inc/d\\\"q.h\" 1\nint x;\n";
  std::vector<std::string> joined;
  std::string absolute = absolute_line_markers(text, "/b/my dir", joined);
  EXPECT_EQ(absolute,
            "# 0 \"/b/my dir/k.cu\"\n# 0 \"<built-in>\"\n# 1 \"/usr/include/stdio.h\" 1 3\n# 1 \"/b/my dir/inc/d\\\"q.h\" 1\nint x;\n");
  EXPECT_EQ(joined, Words({"k.cu", "inc/d\\\"q.h"}));
  // Back, for exactly those names: a file the source named by an absolute path stays absolute.
  std::string stub = absolute + "# 7 \"/b/my dir/other.h\"\n";
  EXPECT_EQ(relative_line_markers(stub, "/b/my dir", joined), text + "# 7 \"/b/my dir/other.h\"\n");
  EXPECT_TRUE(asks_line_info({"cicc", "-generate-line-info", "x.ii"}));
  EXPECT_FALSE(asks_line_info({"cicc", "-O3", "x.ii"}));
}

TEST(NvccPlan, PtxFileDirectivesGetTheBuildsStamps) {
  const std::string ptx = "\t.file\t1 \"/b/k.cu\"\n\t.file\t2 \"/b/gone.h\"\n\t.file\t3 \"/b/s.h\", 5, 6\n\tret;\n";
  auto stat = [](const std::string& name) -> std::optional<FileStamp> {
    if (name == "/b/k.cu") return FileStamp{1796655781, 139};
    if (name == "/b/s.h") return FileStamp{7, 8};
    return std::nullopt;
  };
  EXPECT_EQ(stamped_file_directives(ptx, stat),
            "\t.file\t1 \"/b/k.cu\", 1796655781, 139\n\t.file\t2 \"/b/gone.h\"\n\t.file\t3 \"/b/s.h\", 5, 6\n\tret;\n");
}

TEST(NvccPlan, AModuleIdOfTimeAndProcessIsMadeFromTheUnit) {
  // cudafe++'s stable form (the first external definition's name or its crc) is kept.
  EXPECT_FALSE(stable_module_id("_23493e23_4_k_cu__Z1kPfi", "u"));
  EXPECT_FALSE(stable_module_id("_775905f6_12_mergeSort_cu_ccc79862", "u"));
  // Its time-and-pid form: the head kept, the tail the unit's.
  auto a = stable_module_id("_775905f6_12_mergeSort_cu_82aa6678_26026", "unit");
  auto b = stable_module_id("_775905f6_12_mergeSort_cu_5d1f0a3b_26058", "unit");
  auto c = stable_module_id("_775905f6_12_mergeSort_cu_82aa6678_26026", "another unit");
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(*a, *b) << "another run of cudafe++, the same ID";
  EXPECT_NE(*a, *c);
  EXPECT_TRUE(a->starts_with("_775905f6_12_mergeSort_cu_")) << *a;
  EXPECT_FALSE(stable_module_id("_82aa6678_26026", "u")) << "no head: not cudafe++'s form";
}

TEST(PlanRunner, ATaskWaitsForItsFilesMakerAndEveryBarrier) {
  // 0 writes a, 1 writes b, 2 reads a (waits for 0 only), 3 is a barrier, 4 reads b after it.
  std::mutex mutex;
  std::vector<int> order;
  auto step = [&](int n) {
    return [&, n](Printed& out) {
      std::lock_guard lock(mutex);
      order.push_back(n);
      out.add("out" + std::to_string(n) + "\n", "err" + std::to_string(n) + "\n");
      return true;
    };
  };
  std::vector<Task> tasks = {{step(0), {"/w/a"}, false, {}}, {step(1), {"/w/b"}, false, {}},
                             {step(2), {"/w/a"}, false, {}}, {step(3), {}, true, {}},
                             {step(4), {"/w/b"}, false, {}}};
  std::vector<Printed> printed;
  ASSERT_TRUE(run_plan(tasks, printed, 4));
  auto at = [&](int n) { return std::find(order.begin(), order.end(), n) - order.begin(); };
  EXPECT_LT(at(0), at(2));
  EXPECT_LT(at(0), at(3));
  EXPECT_LT(at(1), at(3));
  EXPECT_LT(at(2), at(3));
  EXPECT_LT(at(3), at(4));
  ASSERT_EQ(printed.size(), 5u);
  for (int n = 0; n < 5; ++n) EXPECT_EQ(printed[n].out, "out" + std::to_string(n) + "\n") << "each in its own slot";
}

TEST(PlanRunner, WhatATaskPrintsGoesToItsSlot) {
  std::vector<Task> tasks = {{[](Printed& out) { return out.add("late\n", ""), true; }, {}, false, 2},
                             {[](Printed& out) { return out.add("early\n", ""), true; }, {}, false, 0}};
  std::vector<Printed> printed;
  ASSERT_TRUE(run_plan(tasks, printed, 2));
  ASSERT_EQ(printed.size(), 3u);
  EXPECT_EQ(printed[0].out, "early\n");
  EXPECT_EQ(printed[1].out, "");
  EXPECT_EQ(printed[2].out, "late\n");
}

TEST(PlanRunner, AFailureStartsNothingAfterIt) {
  std::atomic<int> ran = 0;
  std::vector<Task> tasks = {{[&](Printed&) { return ++ran, false; }, {}, true, {}},
                             {[&](Printed&) { return ++ran, true; }, {}, false, {}}};
  std::vector<Printed> printed;
  EXPECT_FALSE(run_plan(tasks, printed, 4));
  EXPECT_EQ(ran, 1) << "the task after the failed barrier never started";
  EXPECT_EQ(work_files({"--image3=kind=elf,sm=80,file=/w/x.cubin", "/w/y.ptx", "z"}, "/w/"),
            Words({"/w/x.cubin", "/w/y.ptx"}));
}

// A recorded plan (tests/data/launcher/plans/NAME.nvcc or .clang).
struct Record {
  std::string name;
  Words args;
  int exit = 0;
  std::string output;  // the dry run's standard error
};

Record read_record(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  Record r;
  r.name = path.filename().string();
  std::string line;
  std::getline(in, line);
  r.args = nlohmann::json::parse(line.substr(std::string_view("# args: ").size())).get<Words>();
  std::getline(in, line);
  r.exit = std::stoi(line.substr(std::string_view("# exit: ").size()));
  r.output.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

// The folder record.sh gave the compilers as TMPDIR: the plans' work folder.
constexpr std::string_view k_work = "/tmp/kcache-plans/work/";

std::vector<std::string> record_names() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(fs::path(KCACHE_TEST_DATA_DIR) / "launcher" / "plans")) {
    std::string ext = e.path().extension().string();
    if (ext == ".nvcc" || ext == ".clang") out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// What the launcher does with each recorded command line: "cached" (one source, its plan run
// step by step), "split N" (N sources, each its own compile), or the reason it runs the
// compiler unchanged. Written down one by one: a change to a table or a planner that moves a
// real command line from one to another fails here.
const std::map<std::string, std::string>& expected_outcomes() {
  static const std::map<std::string, std::string> k = {
      {"arch-all-major.nvcc", "cached"},
      {"arch-native.nvcc", "cached"},
      {"bazel-rules-cuda.nvcc", "cached"},
      {"ccbin.nvcc", "cached"},
      {"cmake-cuda-3.18.nvcc", "cached"},
      {"cmake-cuda-separable.nvcc", "cached"},
      {"code-sm-only.nvcc", "cached"},
      {"compile-and-link.nvcc", "not a compile (linking)"},
      {"compiler-options-two-words.nvcc", "cached"},
      {"cubin.nvcc", "option -cubin"},
      {"cutlass.nvcc", "cached"},
      {"dc.nvcc", "cached"},
      {"define-quoted.nvcc", "cached"},
      {"depfile-MD.nvcc", "cached"},
      {"deps-only-M.nvcc", "option -M"},
      {"device-debug-G.nvcc", "option -G"},
      {"dlink.nvcc", "device link"},
      {"cmake-device-link.nvcc", "device link"},
      {"expt-flags.nvcc", "cached"},
      {"fatbin.nvcc", "option -fatbin"},
      {"forward-unknown.nvcc", "cached"},
      {"gencode-equals-ptx-and-sass.nvcc", "cached"},
      {"gencode-three.nvcc", "cached"},
      {"gencode-two.nvcc", "cached"},
      {"generate-code-compute-sm.nvcc", "cached"},
      {"host-cpp-only.nvcc", "cached"},
      {"host-debug-g.nvcc", "cached"},
      {"isystem.nvcc", "cached"},
      {"lineinfo.nvcc", "cached"},
      {"link.nvcc", "not a compile (linking)"},
      {"make-typical.nvcc", "cached"},
      {"maxrregcount.nvcc", "cached"},
      {"meson.nvcc", "cached"},
      {"no-arch.nvcc", "cached"},
      {"output-before-c.nvcc", "cached"},
      {"path-with-space.nvcc", "cached"},
      {"preprocess-E.nvcc", "option -E"},
      {"plain-sm80.nvcc", "cached"},
      {"ptx.nvcc", "option --ptx"},
      {"pytorch-cpp-extension.nvcc", "cached"},
      {"pytorch-setup-release.nvcc", "cached"},
      {"rdc-c.nvcc", "cached"},
      {"rdc-dc.nvcc", "cached"},
      {"threads-0.nvcc", "plan syntax"},
      {"three-sources.nvcc", "split 3"},
      {"two-sources-dc.nvcc", "split 2"},
      {"two-sources-one-output.nvcc", "several sources with -o"},
      {"two-sources.nvcc", "split 2"},
      {"unknown-option-MQ.nvcc", "several sources with one dependency file"},  // -MQ is no option of nvcc: its value reads as a source, and nvcc, run unchanged, says so
      {"use-fast-math.nvcc", "cached"},
      {"x-cu-cpp.nvcc", "cached"},
      {"xcompiler-equals-list.nvcc", "cached"},
      {"xptxas-v.nvcc", "cached"},
      {"clang-E.clang", "option -E (clang)"},
      {"clang-cmake-shape.clang", "cached"},
      {"clang-cuda-default-arch.clang", "cached"},
      {"clang-cxx-not-cuda.clang", "not CUDA (clang)"},
      {"clang-define-spaces.clang", "cached"},
      {"clang-device-only.clang", "option --cuda-device-only (clang)"},
      {"clang-fgpu-rdc.clang", "cached"},
      {"clang-fpic.clang", "cached"},
      {"clang-g.clang", "option -g (clang)"},
      {"clang-host-only.clang", "option --cuda-host-only (clang)"},
      {"clang-include-isystem.clang", "cached"},
      {"clang-md-mf.clang", "cached"},
      {"clang-no-cuda-path.clang", "cached"},
      {"clang-no-x.clang", "cached"},
      {"clang-o2-cxx17.clang", "cached"},
      {"clang-offload-arch.clang", "cached"},
      {"clang-path-with-space.clang", "cached"},
      {"clang-plain.clang", "cached"},
      {"clang-two-archs.clang", "cached"},
      {"clang-two-sources.clang", "split 2"},
      {"clang-xclang.clang", "cached"},
  };
  return k;
}

bool any_starts_with(const Words& words, std::initializer_list<std::string_view> prefixes) {
  return std::any_of(words.begin(), words.end(), [&](const std::string& w) {
    return std::any_of(prefixes.begin(), prefixes.end(), [&](std::string_view p) { return w.starts_with(p); });
  });
}

// nvcc's plan of one source, as the launcher runs it: every step of a program it knows, one
// host compile of cudafe++'s output whose split keeps the preprocessor's options and the work
// folder out of the key, and the whole compile looked up unless the host compile asks for debug
// information. The outcome, or why the plan is not run.
std::string check_nvcc_plan(const Record& r) {
  if (r.exit != 0) return "nvcc --dryrun failed";
  std::map<std::string, std::string> vars = {{"PATH", "/usr/bin:/bin"}};
  auto steps = parse_plan(r.output, vars);
  if (!steps) return "plan syntax";
  for (PlanStep& step : *steps) {
    for (std::string& w : step.argv) w = fixed_temporary_names(std::move(w));
  }
  if (auto refused = plan_refusal(*steps, k_work)) return *refused;
  int host_compiles = 0;
  for (const PlanStep& step : *steps) {
    if (step.kind != PlanStep::Kind::run || !is_host_compiler(step.argv.front()) || !is_host_compile(step.argv, k_work)) continue;
    ++host_compiles;
    HostSplit split = split_host_compile(step.argv, k_work, "OBJECT", "TEXT");
    EXPECT_EQ(split.target, object_path(nvcc_options(), r.args)) << r.name << ": the object the plan writes";
    EXPECT_TRUE(split.input_name.ends_with(".cudafe1.cpp")) << r.name << ": " << split.input_name;
    EXPECT_FALSE(any_starts_with(split.key_args, {"-I", "-D", "-isystem", "-include", std::string_view(k_work)}))
        << r.name << ": a preprocessor option or the work folder in the host key";
    EXPECT_TRUE(split.gcc) << r.name;
    EXPECT_NE(std::find(split.preprocess.begin(), split.preprocess.end(), "-fdirectives-only"), split.preprocess.end());
    EXPECT_NE(std::find(split.compile.begin(), split.compile.end(), "OBJECT"), split.compile.end());
    EXPECT_EQ(std::count(split.compile.begin(), split.compile.end(), "-c"), 1) << r.name;
    std::string whole = whole_compile_target(*steps, k_work);
    EXPECT_EQ(whole.empty(), split.debug) << r.name << ": the whole compile is looked up unless debug info names the folder";
    if (!whole.empty()) {
      EXPECT_EQ(whole, split.target) << r.name;
    }
  }
  // A CUDA source has its one host compile; a C++ source (host-cpp-only) none.
  bool cuda = r.name != "host-cpp-only.nvcc";
  EXPECT_EQ(host_compiles, cuda ? 1 : 0) << r.name;
  return "cached";
}

// clang's plan of one source: its device compiles and the host compile split so that the
// compile of the preprocessed text keeps none of the preprocessor's options; the dependency file
// with the host side alone.
std::string check_clang_plan(const Record& r) {
  if (r.exit != 0) return "clang -### failed";
  ClangPlanOrReason read = read_clang_plan(r.output);
  if (!read.plan) return read.reason;
  name_the_unit(*read.plan, "src/k.cu");
  int device = 0, host = 0;
  for (const Words& argv : read.plan->commands) {
    for (const std::string& a : argv) {
      if (a.starts_with("-cuid=")) {
        EXPECT_EQ(a.size(), 6u + 16u) << r.name;
      }
    }
    if (argv.size() < 2 || argv[1] != "-cc1") continue;
    bool is_device = is_device_compile(argv);
    device += is_device;
    host += !is_device;
    ClangSplit s = split_cc1(argv, is_device ? "-S" : "-emit-obj", "TEXT", !is_device, "OUT", "DEPS");
    EXPECT_FALSE(any_starts_with(Words(s.compile.begin() + 1, s.compile.end()),
                                 {"-I", "-D", "-internal-isystem", "-internal-externc-isystem", "-dependency-file"}))
        << r.name << ": a preprocessor option in the compile of the text";
    EXPECT_EQ(s.compile.back(), "TEXT");
    EXPECT_NE(std::find(s.compile.begin(), s.compile.end(), "cuda-cpp-output"), s.compile.end()) << r.name;
    EXPECT_NE(std::find(s.preprocess.begin(), s.preprocess.end(), "-E"), s.preprocess.end()) << r.name;
    EXPECT_EQ(s.preprocess.back(), argv.back()) << r.name << ": the preprocessor reads the source";
    bool md = r.name == "clang-md-mf.clang" || r.name == "clang-cmake-shape.clang";
    EXPECT_EQ(!s.dependency_target.empty(), md && !is_device) << r.name << ": the dependency file, with the host side alone";
  }
  EXPECT_GE(device, 1) << r.name;
  EXPECT_EQ(host, 1) << r.name;
  return "cached";
}

// nvcc's device link, as the launcher runs it: nvlink's lines go to the daemon (plan_nvlink), no
// whole compile is looked up (its objects' bytes are in no preprocessed text).
std::string check_device_link_plan(const Record& r) {
  std::map<std::string, std::string> vars = {{"PATH", "/usr/bin:/bin"}};
  auto steps = parse_plan(r.output, vars);
  if (!steps) return "plan syntax";
  if (auto refused = plan_refusal(*steps, k_work)) return *refused;
  EXPECT_EQ(whole_compile_target(*steps, k_work), "") << r.name;
  auto toolkit_archive = [](const std::string& p) { return p.ends_with("/libcudadevrt.a") || p.ends_with("/libcudart_static.a"); };
  int links = 0;
  for (const PlanStep& step : *steps) {
    if (step.kind != PlanStep::Kind::run || !step.argv.front().ends_with("nvlink")) continue;
    ++links;
    NvlinkStep planned = plan_nvlink(step.argv, k_work, toolkit_archive);
    EXPECT_EQ(planned.refusal, "") << r.name;
    EXPECT_TRUE(planned.cudadevrt.ends_with("/libcudadevrt.a")) << r.name;
    for (std::size_t i = 1; i < planned.argv.size(); ++i) {
      const std::string& a = planned.argv[i];
      if (a.front() == '-' || planned.argv[i - 1] == "--host-ccbin" || planned.argv[i - 1] == "-L") continue;
      EXPECT_TRUE(a.starts_with(k_work)) << r.name << ": " << a << " is not named in the work folder";
    }
  }
  EXPECT_GE(links, 1) << r.name;
  return "device link";
}

class RecordedPlan : public ::testing::TestWithParam<std::string> {};

TEST_P(RecordedPlan, GoesTheWayItsShapeShould) {
  Record r = read_record(fs::path(KCACHE_TEST_DATA_DIR) / "launcher" / "plans" / GetParam());
  auto expected = expected_outcomes().find(r.name);
  ASSERT_NE(expected, expected_outcomes().end()) << r.name << " has no expected outcome";
  const bool nvcc = r.name.ends_with(".nvcc");
  Invocation inv = nvcc ? nvcc_invocation(r.args) : clang_invocation(r.args);
  std::string outcome;
  if (!inv.unchanged.empty()) {
    outcome = inv.unchanged;
  } else if (!nvcc && !is_cuda_compile(r.args)) {
    outcome = "not CUDA (clang)";
  } else if (inv.per_source.size() > 1) {
    outcome = "split " + std::to_string(inv.per_source.size());
    // The plan of the whole line compiles every source: the launcher never runs it as one.
    std::map<std::string, std::string> vars;
    if (nvcc) {
      auto steps = parse_plan(r.output, vars);
      ASSERT_TRUE(steps);
      EXPECT_EQ(plan_refusal(*steps, k_work), "several sources in nvcc's plan");
    } else {
      EXPECT_EQ(read_clang_plan(r.output).reason, "several sources (clang)");
    }
    for (const Words& one : inv.per_source) {
      Invocation again = nvcc ? nvcc_invocation(one) : clang_invocation(one);
      EXPECT_EQ(again.per_source.size(), 1u) << "each source's own line is one compile";
    }
  } else if (inv.device_link) {
    outcome = check_device_link_plan(r);
  } else {
    outcome = nvcc ? check_nvcc_plan(r) : check_clang_plan(r);
  }
  EXPECT_EQ(outcome, expected->second) << r.name;
}

INSTANTIATE_TEST_SUITE_P(Records, RecordedPlan, ::testing::ValuesIn(record_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

TEST(RecordedPlans, EveryRecordHasAnExpectedOutcome) {
  EXPECT_EQ(record_names().size(), expected_outcomes().size());
  EXPECT_GE(record_names().size(), 60u);
}

}  // namespace
}  // namespace kcache::launcher

// ---- Direct mode (launcher/direct.hpp) ----

namespace direct_mode {

using kcache::launcher::direct_args;
using kcache::launcher::FileState;
using kcache::launcher::FileSystem;
using kcache::launcher::manifest_entry_holds;
using kcache::launcher::ManifestEntry;
using kcache::launcher::ManifestFile;
using kcache::launcher::read_manifest;
using kcache::launcher::reads_the_time;
using kcache::launcher::shadow_probes;
using kcache::launcher::write_manifest;

std::vector<std::string> words(std::initializer_list<const char*> list) { return {list.begin(), list.end()}; }

// A CMake line's: the object's and the dependency file's places are not in the key, the rule's
// target is, and with absolute paths the folder is not.
TEST(DirectMode, TheKeyLeavesOutWhereOutputsGo) {
  auto a = direct_args(kcache::launcher::nvcc_options(),
                       words({"-I/src/common", "-isystem", "/opt/inc", "-DX=1", "-arch=sm_80", "-MD", "-MT", "obj/k.o",
                              "-MF", "obj/k.o.d", "-x", "cu", "-c", "/src/k.cu", "-o", "obj/k.o"}));
  ASSERT_TRUE(a);
  EXPECT_FALSE(a->folder_matters);
  EXPECT_EQ(a->include_dirs, words({"/src/common", "/opt/inc"}));
  EXPECT_EQ(a->dependency_target, "obj/k.o");
  for (const std::string& w : a->words) {
    EXPECT_NE(w, "obj/k.o.d");
    EXPECT_NE(w, "-o");
  }
  auto b = direct_args(kcache::launcher::nvcc_options(),
                       words({"-I/src/common", "-isystem", "/opt/inc", "-DX=1", "-arch=sm_80", "-MD", "-MT", "obj/k.o",
                              "-MF", "elsewhere.d", "-x", "cu", "-c", "/src/k.cu", "-o", "other/k.o"}));
  ASSERT_TRUE(b);
  EXPECT_EQ(a->words, b->words) << "another build folder's line has the same key";
}

TEST(DirectMode, TheFolderMattersWhereAPathIsRelativeOrDebugInformationNamesIt) {
  const auto& nvcc = kcache::launcher::nvcc_options();
  EXPECT_TRUE(direct_args(nvcc, words({"-c", "k.cu", "-o", "k.o"}))->folder_matters) << "a relative source";
  EXPECT_TRUE(direct_args(nvcc, words({"-Iinc", "-c", "/s/k.cu"}))->folder_matters) << "a relative -I";
  EXPECT_TRUE(direct_args(nvcc, words({"-g", "-c", "/s/k.cu"}))->folder_matters) << "host debug information";
  EXPECT_TRUE(direct_args(nvcc, words({"-Xcompiler", "-Iinc", "-c", "/s/k.cu"}))->folder_matters);
  EXPECT_TRUE(direct_args(nvcc, words({"-Xcompiler=-fPIC,-g", "-c", "/s/k.cu"}))->folder_matters);
  EXPECT_TRUE(direct_args(nvcc, words({"-Xcompiler=-fprofile-arcs", "-c", "/s/k.cu"}))->folder_matters);
  EXPECT_FALSE(direct_args(nvcc, words({"-Xcompiler=-fPIC,-O2,-isystem/opt/x", "-c", "/s/k.cu"}))->folder_matters)
      << "CMake's -Xcompiler=-fPIC names no folder";
  EXPECT_FALSE(direct_args(nvcc, words({"-DNAME=rel/path", "-c", "/s/k.cu"}))->folder_matters) << "a macro is no path";
  EXPECT_FALSE(direct_args(nvcc, words({"-lineinfo", "-c", "/s/k.cu"}))) << "line tables hold the files' times";
  EXPECT_FALSE(direct_args(nvcc, words({"-MD", "-c", "/s/k.cu"}))) << "a dependency file named by nvcc alone";
  EXPECT_TRUE(direct_args(nvcc, words({"-MD", "-MF", "k.d", "-c", "/s/k.cu"})));
  EXPECT_EQ(direct_args(nvcc, words({"-MD", "-MF", "k.d", "-c", "/s/k.cu", "-o", "o/k.o"}))->dependency_target, "o/k.o");
}

ManifestEntry an_entry() {
  ManifestEntry e;
  e.files.push_back({"/s/k.cu", 1000, 1001, 10, kcache::sha256("k.cu bytes")});
  e.files.push_back({"inc/k h.h", 0, 0, 7, kcache::sha256("header!")});
  e.absent = {"/s/k.h", "/s/inc2"};
  e.request = std::string("\x0a\x03\x00\xff", 4);
  e.out = "out\n";
  e.driver = "nvcc warning : x\n";
  e.err = "k.cu(3): warning\n";
  e.dependencies = "k.o : /s/k.cu \\\n    inc/k\\ h.h\n";
  return e;
}

TEST(DirectMode, AManifestReadsBackAsWritten) {
  std::vector<ManifestEntry> entries = {an_entry(), an_entry()};
  entries[1].absent.clear();
  auto back = read_manifest(write_manifest(entries));
  ASSERT_TRUE(back);
  ASSERT_EQ(back->size(), 2u);
  EXPECT_EQ((*back)[0].files[1].path, "inc/k h.h");
  EXPECT_EQ((*back)[0].files[0].ctime_ns, 1001);
  EXPECT_TRUE((*back)[0].files[1].digest == kcache::sha256("header!"));
  EXPECT_EQ((*back)[0].absent, entries[0].absent);
  EXPECT_EQ((*back)[0].request, entries[0].request);
  EXPECT_EQ((*back)[0].dependencies, entries[0].dependencies);
  EXPECT_EQ((*back)[0].driver, entries[0].driver);
  EXPECT_EQ((*back)[0].err, entries[0].err);
  EXPECT_TRUE((*back)[1].absent.empty());
  std::vector<ManifestEntry> many(7, an_entry());
  EXPECT_EQ(read_manifest(write_manifest(many))->size(), kcache::launcher::k_manifest_entries);
  std::string text = write_manifest(entries);
  EXPECT_FALSE(read_manifest(text.substr(0, text.size() - 3))) << "cut short";
  EXPECT_FALSE(read_manifest("kcache-manifest 2\n"));
  EXPECT_FALSE(read_manifest(text + "file 1 2 3 zz 00\n"));
  EXPECT_FALSE(read_manifest("kcache-manifest 1\nentry\nfile 1 2 3 " + std::string(64, '0') + " 0g\nend\n"));
}

// A file system of a few files, counting what it hashes.
struct FakeFiles {
  std::map<std::string, std::pair<FileState, std::string>> files;
  int hashed = 0, listed = 0;
  FileSystem view() {
    FileSystem fs;
    fs.stat = [this](const std::string& p) -> std::optional<FileState> {
      auto it = files.find(p);
      return it == files.end() ? std::nullopt : std::optional<FileState>(it->second.first);
    };
    fs.digest = [this](const std::string& p) -> std::optional<kcache::Digest> {
      ++hashed;
      auto it = files.find(p);
      return it == files.end() ? std::nullopt : std::optional<kcache::Digest>(kcache::sha256(it->second.second));
    };
    fs.list = [this](const std::string& folder) {
      ++listed;
      std::vector<std::string> names;
      for (const auto& [path, file] : files) {
        if (path.starts_with(folder + "/") && path.find('/', folder.size() + 1) == std::string::npos) {
          names.push_back(path.substr(folder.size() + 1));
        }
      }
      return names;
    };
    return fs;
  }
};

TEST(DirectMode, AnEntryHoldsWhileItsFilesAreAsTheyWere) {
  FakeFiles disk;
  disk.files["/s/k.cu"] = {{1000, 1001, 10}, "k.cu bytes"};
  disk.files["/b/inc/k h.h"] = {{5, 5, 7}, "header!"};
  const ManifestEntry e = an_entry();
  EXPECT_TRUE(manifest_entry_holds(e, "/b", disk.view()));
  EXPECT_EQ(disk.hashed, 1) << "only the header whose times were not trusted is hashed";
  disk.files["/s/k.cu"].first.mtime_ns = 2000;  // touched: the same bytes
  disk.hashed = 0;
  EXPECT_TRUE(manifest_entry_holds(e, "/b", disk.view()));
  EXPECT_EQ(disk.hashed, 2);
  disk.files["/s/k.cu"].second = "k.cu BYTES";  // edited, same size
  EXPECT_FALSE(manifest_entry_holds(e, "/b", disk.view()));
  disk.files["/s/k.cu"] = {{1000, 1001, 11}, "k.cu bytes!"};  // another size: no hashing at all
  disk.hashed = 0;
  EXPECT_FALSE(manifest_entry_holds(e, "/b", disk.view()));
  EXPECT_EQ(disk.hashed, 0);
  disk.files["/s/k.cu"] = {{1000, 1001, 10}, "k.cu bytes"};
  disk.files["/s/k.h"] = {{1, 1, 1}, "x"};  // a header where none was: it would shadow
  EXPECT_FALSE(manifest_entry_holds(e, "/b", disk.view()));
  disk.files.erase("/s/k.h");
  disk.files.erase("/b/inc/k h.h");  // a file it read is gone
  EXPECT_FALSE(manifest_entry_holds(e, "/b", disk.view()));
}

// Many absent names in one folder (a system header's names in a project's folder) are checked by
// one listing of it: any of them there misses, other files there do not.
TEST(DirectMode, ManyAbsentNamesInAFolderAreOneListing) {
  FakeFiles disk;
  disk.files["/s/k.cu"] = {{1000, 1001, 10}, "k.cu bytes"};
  ManifestEntry e;
  e.files.push_back({"/s/k.cu", 1000, 1001, 10, kcache::sha256("k.cu bytes")});
  for (int i = 0; i < 40; ++i) e.absent.push_back("/s/h" + std::to_string(i) + ".h");
  disk.files["/s/k.o"] = {{1, 1, 1}, "an object written beside the source"};
  EXPECT_TRUE(manifest_entry_holds(e, "/b", disk.view()));
  EXPECT_EQ(disk.listed, 1);
  disk.files["/s/h17.h"] = {{1, 1, 1}, "a new header"};
  EXPECT_FALSE(manifest_entry_holds(e, "/b", disk.view()));
}

// Where a new header would shadow one the compile read: in the project's folders (quoted
// includes look there first) and in the include directories before the one it was found in.
TEST(DirectMode, ShadowProbesAreTheFirstMissingComponentOfEachEarlierPlace) {
  std::set<std::string> existing = {"/p", "/p/src", "/p/src/k.cu", "/p/inc1", "/p/inc2", "/p/inc2/sub",
                                    "/p/inc2/sub/h.h", "/usr/include", "/usr/include/stdio.h", "/p/inc1/stdio.h"};
  auto exists = [&](const std::string& p) { return existing.contains(p); };
  auto probes = shadow_probes({"/p/src/k.cu", "/p/inc2/sub/h.h", "/usr/include/stdio.h"}, {"/p/inc1", "/p/inc2"},
                              {"/usr/include"}, exists);
  std::set<std::string> got(probes.begin(), probes.end());
  EXPECT_TRUE(got.contains("/p/inc1/sub")) << "sub/h.h in the -I folder before inc2";
  EXPECT_TRUE(got.contains("/p/src/sub")) << "sub/h.h next to the source";
  EXPECT_FALSE(got.contains("/p/inc2/sub")) << "where it was found exists";
  EXPECT_TRUE(got.contains("/p/src/stdio.h")) << "a system header's name in the project's folders";
  EXPECT_FALSE(got.contains("/p/inc1/stdio.h")) << "an existing file did not shadow when the compile ran";
  EXPECT_TRUE(got.contains("/p/inc2/stdio.h"));
  for (const std::string& p : got) EXPECT_FALSE(p.starts_with("/usr/include/")) << p << ": system folders are not the project's";
}

TEST(DirectMode, AFileThatAsksForTheTimeHasNoManifest) {
  EXPECT_TRUE(reads_the_time("const char* built = __DATE__ \" \" __TIME__;"));
  EXPECT_TRUE(reads_the_time("__TIMESTAMP__"));
  EXPECT_FALSE(reads_the_time("__global__ void k() {}"));
}

}  // namespace direct_mode

namespace device_link {

using kcache::launcher::plan_clang_nvlink;
using kcache::launcher::plan_nvlink;

// CMake's device link line: its objects and archives named in the work folder, the rest as the
// plan has it (nvlink writes its options into the cubin).
TEST(DeviceLink, NvlinksLineNamesEveryFileItLinksInTheWorkFolder) {
  const std::string work = "/w/";
  auto exists = [](const std::string& p) {
    return p == "/cuda/lib/libcudadevrt.a" || p == "/cuda/lib/libcudart_static.a" || p == "/cuda/lib/libcublas_device.a";
  };
  auto step = plan_nvlink({"nvlink", "-m64", "--shared", "--arch=sm_80", "--register-link-binaries=/w/x.reg.c", "-L/cuda/lib",
                           "-lcudadevrt", "-lcudart_static", "-lrt", "-cpu-arch=X86_64", "obj/app.cu.o", "/proj/libcore.a",
                           "-o", "/w/x.cubin", "--host-ccbin", "gcc"},
                          work, exists);
  ASSERT_EQ(step.refusal, "");
  EXPECT_EQ(step.cudadevrt, "/cuda/lib/libcudadevrt.a");
  std::vector<std::string> expected = {"nvlink", "-m64", "--shared", "--arch=sm_80", "--register-link-binaries", "/w/x.reg.c",
                                       "-L/cuda/lib", "-lcudadevrt", "-lcudart_static", "-lrt", "-cpu-arch=X86_64",
                                       "/w/dlink-input-0.o", "/w/dlink-input-1.a", "-o", "/w/x.cubin", "--host-ccbin", "gcc"};
  EXPECT_EQ(step.argv, expected);
  ASSERT_EQ(step.inputs.size(), 2u);
  EXPECT_EQ(step.inputs[0].first, "obj/app.cu.o");
  EXPECT_EQ(step.inputs[1].second, "/w/dlink-input-1.a");
  EXPECT_NE(plan_nvlink({"nvlink", "-lcudadevrt", "a.o"}, work, exists).refusal, "") << "no libcudadevrt.a to name";
  EXPECT_NE(plan_nvlink({"nvlink", "-L/cuda/lib", "-lcudadevrt", "a.cubin"}, work, exists).refusal, "")
      << "an input of a kind it does not know";
  EXPECT_NE(plan_nvlink({"nvlink", "-L/cuda/lib", "-lcudadevrt", "-lcublas_device", "a.o"}, work, exists).refusal, "")
      << "another library of device code";
}

// clang's device link: each arch's nvlink as clang-nvlink-wrapper writes it (recorded from clang 22),
// in the spellings the daemon reads, its cubins and image named in the work folder.
TEST(DeviceLink, ClangsNvlinkLineIsAStepOfItsCubins) {
  const std::string work = "/w/";
  auto step = plan_clang_nvlink({"/cuda/bin/nvlink", "-o", "/tmp/app.nvptx64.sm_80-9a927d.img", "-arch", "sm_80", "-L",
                                 "/usr/local/cuda/lib64/stubs", "-L", "/usr/lib/llvm-22/lib",
                                 "/tmp/a-nvptx64-nvidia-cuda-sm_80-554626.cubin", "/tmp/b-nvptx64-nvidia-cuda-sm_80-7e9382.cubin"},
                                work);
  ASSERT_EQ(step.refusal, "");
  std::vector<std::string> expected = {"/cuda/bin/nvlink", "-o", "/w/image.cubin", "-arch=sm_80",
                                       "-L/usr/local/cuda/lib64/stubs", "-L/usr/lib/llvm-22/lib", "/w/input-0.cubin",
                                       "/w/input-1.cubin"};
  EXPECT_EQ(step.argv, expected);
  EXPECT_EQ(step.output, "/tmp/app.nvptx64.sm_80-9a927d.img");
  ASSERT_EQ(step.inputs.size(), 2u);
  EXPECT_EQ(step.inputs[1].first, "/tmp/b-nvptx64-nvidia-cuda-sm_80-7e9382.cubin");
  EXPECT_EQ(step.inputs[1].second, "/w/input-1.cubin");
  EXPECT_EQ(plan_clang_nvlink({"nvlink", "-o", "x.img", "--arch=sm_90", "-m64", "a.cubin"}, work).argv,
            (std::vector<std::string>{"nvlink", "-o", "/w/image.cubin", "-arch=sm_90", "/w/input-0.cubin"}));
  for (const std::vector<std::string>& refused :
       {std::vector<std::string>{"nvlink", "-o", "x", "-arch", "sm_80", "-g", "a.cubin"},       // debug: its own folder's names
        std::vector<std::string>{"nvlink", "-o", "x", "-arch", "sm_80", "-lcudadevrt", "a.cubin"},  // a library
        std::vector<std::string>{"nvlink", "-o", "x", "-arch", "sm_80", "a.o"},                 // not a cubin
        std::vector<std::string>{"nvlink", "-o", "x", "-arch", "compute_80", "a.cubin"},        // no sm_ arch
        std::vector<std::string>{"nvlink", "-arch", "sm_80", "a.cubin"}}) {                       // no output
    EXPECT_NE(plan_clang_nvlink(refused, work).refusal, "") << refused[refused.size() - 2];
  }
}

}  // namespace device_link
