// Build steps (kcache/step.hpp): what the daemon accepts to run, and how a step is keyed; and the
// launcher's reading of nvcc's plan (client/cli/launcher/nvcc_plan.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "kcache/step.hpp"
#include "launcher/nvcc_plan.hpp"
#include "wire/wire.hpp"

namespace kcache {
namespace {

// A cicc step as the launcher sends it for `nvcc -c saxpy.cu -arch=sm_80` (names as it gives them).
StepSpec cicc_step() {
  StepSpec s;
  s.tool = StepTool::cicc;
  s.args = {"--c++17", "--static-host-stub", "--device-hidden-visibility", "--gnu_version=120200",
            "--display_error_number", "--orig_src_file_name", "saxpy.cu", "--orig_src_path_name",
            "/src/saxpy.cu", "--allow_managed", "-arch", "compute_80", "-m64", "--no-version-ident", "-ftz=0",
            "-prec_div=1", "-prec_sqrt=1", "-fmad=1", "--include_file_name", "tmpxft_00000000_00000000-3_saxpy.fatbin.c",
            "-tused", "--module_id_file_name", "f0.module_id", "--gen_c_file_name", "f1.c", "--stub_file_name",
            "f2.c", "--gen_device_file_name", "f3.gpu", "f4.ii", "-o", "f5.ptx"};
  s.inputs = {"f0.module_id", "f4.ii"};
  s.outputs = {"f1.c", "f2.c", "f3.gpu", "f5.ptx"};
  return s;
}

StepSpec ptxas_step() {
  StepSpec s;
  s.tool = StepTool::ptxas;
  s.args = {"-arch=sm_80", "-m64", "-v", "--compile-only", "f0.ptx", "-o", "f1.cubin"};
  s.inputs = {"f0.ptx"};
  s.outputs = {"f1.cubin"};
  return s;
}

TEST(Steps, TheStepsNvccPlansAreAccepted) {
  EXPECT_TRUE(check_step(cicc_step()));
  EXPECT_TRUE(check_step(ptxas_step()));
}

TEST(Steps, AnythingThatCouldReachOutsideTheStepsFolderIsRefused) {
  struct Case {
    const char* what;
    std::function<void(StepSpec&)> change;
    std::string expect;
  };
  std::vector<Case> cases = {
      {"an output path", [](StepSpec& s) { s.args.back() = "/etc/passwd"; }, "is not a declared output"},
      {"an input path", [](StepSpec& s) { s.args[s.args.size() - 3] = "/etc/shadow"; }, "neither an option nor a declared input"},
      {"an unknown option", [](StepSpec& s) { s.args.push_back("--emit-llvm-file=x"); }, "is not an option kcache runs"},
      {"an option file", [](StepSpec& s) { s.args.push_back("--options-file"); }, "is not an option kcache runs"},
      {"a value-taking option last", [](StepSpec& s) { s.args.push_back("-o"); }, "lacks its value"},
      {"a name with a slash", [](StepSpec& s) { s.inputs.push_back("../f9.ii"); }, "cannot name a step's file"},
      {"a hidden name", [](StepSpec& s) { s.outputs.push_back(".bashrc"); }, "cannot name a step's file"},
      {"a name twice", [](StepSpec& s) { s.outputs.push_back("f4.ii"); }, "twice"},
      {"a file named stderr", [](StepSpec& s) { s.outputs.push_back("stderr"); }, "cannot name a step's file"},
      {"a NUL", [](StepSpec& s) { s.args.push_back(std::string("-O3\0x", 5)); }, "NUL"},
      {"too many arguments", [](StepSpec& s) { s.args.resize(k_max_step_args + 1, "-m64"); }, "at most"},
      {"no input", [](StepSpec& s) { s.inputs.clear(); }, "inputs"},
      {"a response file as a value", [](StepSpec& s) { s.args[6] = "@/etc/kcache/tokens"; }, "starts with '@'"},
      {"a virtual arch that is not one", [](StepSpec& s) { s.args[11] = "sm_80"; }, "is not a virtual arch"},
      {"a register count that is not one", [](StepSpec& s) { s.args.insert(s.args.end(), {"-maxreg", "@x"}); },
       "starts with '@'"},
  };
  for (const Case& c : cases) {
    StepSpec s = cicc_step();
    c.change(s);
    auto checked = check_step(s);
    ASSERT_FALSE(checked) << c.what;
    EXPECT_EQ(checked.error().code, ErrorCode::k_invalid_argument) << c.what;
    EXPECT_NE(checked.error().message.find(c.expect), std::string::npos) << c.what << ": " << checked.error().message;
  }
  StepSpec host;
  host.tool = StepTool::host;
  host.args = {"-O2", "-anything-goes-here"};  // never run: only part of the key
  host.inputs = {"host.ii"};
  host.outputs = {"object"};
  EXPECT_TRUE(check_step(host));
  host.outputs = {"object", "extra"};
  EXPECT_FALSE(check_step(host));
}

// A clang device compile as the launcher sends it for `clang++-22 -x cuda --cuda-gpu-arch=sm_80
// -O2 -c saxpy.cu` (clang++ -###, less the preprocessor's options; names as it gives them).
StepSpec clang_step() {
  StepSpec s;
  s.tool = StepTool::clang;
  s.args = {"-cc1", "-triple", "nvptx64-nvidia-cuda", "-aux-triple", "x86_64-pc-linux-gnu", "-O2", "-S",
            "-disable-free", "-clear-ast-before-backend", "-disable-llvm-verifier", "-discard-value-names",
            "-main-file-name", "saxpy.cu", "-mrelocation-model", "static", "-mframe-pointer=all", "-fno-rounding-math",
            "-no-integrated-as", "-aux-target-cpu", "x86-64", "-fcuda-is-device", "-mllvm",
            "-enable-memcpyopt-without-libcalls", "-fno-threadsafe-statics", "-fcuda-allow-variadic-functions",
            "-mlink-builtin-bitcode", "libdevice.10.bc", "-target-sdk-version=12.9", "-target-cpu", "sm_80",
            "-target-feature", "+ptx88", "-debugger-tuning=gdb", "-fno-dwarf-directory-asm", "-std=c++17",
            "-fdeprecated-macro", "-fno-autolink", "-ferror-limit", "19", "--offload-new-driver",
            "-fgnuc-version=4.2.1", "-fskip-odr-check-in-gmf", "-fcxx-exceptions", "-fexceptions", "-vectorize-loops",
            "-vectorize-slp", "-cuid=0123456789abcdef", "-fdwarf2-cfi-asm", "-o", "f1.s", "-x", "cuda-cpp-output",
            "f0.cui"};
  s.inputs = {"f0.cui"};
  s.outputs = {"f1.s"};
  return s;
}

TEST(Steps, ClangRunsOnlyItsDeviceCompileOfPreprocessedSource) {
  EXPECT_TRUE(check_step(clang_step())) << check_step(clang_step()).error().message;
  StepSpec ptxas = ptxas_step();
  ptxas.args = {"-m64", "-O2", "--gpu-name", "sm_80", "--output-file", "f1.cubin", "f0.s", "-c"};
  ptxas.inputs = {"f0.s"};
  EXPECT_TRUE(check_step(ptxas)) << "clang's ptxas line";
  struct Case {
    const char* what;
    std::function<void(StepSpec&)> change;
    std::string expect;
  };
  auto replace = [](std::string from, std::string to) {
    return [=](StepSpec& s) { *std::find(s.args.begin(), s.args.end(), from) = to; };
  };
  std::vector<Case> cases = {
      {"a plugin", [](StepSpec& s) { s.args.insert(s.args.begin() + 1, {"-load", "/tmp/evil.so"}); }, "not an option"},
      {"a pass plugin", [](StepSpec& s) { s.args.push_back("-fpass-plugin=/tmp/evil.so"); }, "not an option"},
      {"another bitcode", replace("libdevice.10.bc", "/etc/passwd"), "is not libdevice"},
      {"an LLVM option writing a file", replace("-enable-memcpyopt-without-libcalls", "-info-output-file=/tmp/x"),
       "not an LLVM option"},
      {"unpreprocessed source", replace("cuda-cpp-output", "cuda"), "not preprocessed CUDA"},
      {"an include", [](StepSpec& s) { s.args.insert(s.args.end() - 1, {"-include", "/etc/passwd"}); }, "not an option"},
      {"a module cache", [](StepSpec& s) { s.args.push_back("-fmodules"); }, "not an option"},
      {"a path in a valued flag", [](StepSpec& s) { s.args.push_back("-fvisibility=/x"); }, "not an option"},
      {"an output path", replace("f1.s", "/tmp/out.s"), "not a declared output"},
      {"a host compile", replace("-fcuda-is-device", "-fno-rtti"), "clang -cc1 -triple nvptx64"},
      {"not cc1", [](StepSpec& s) { s.args.erase(s.args.begin()); }, "clang -cc1 -triple nvptx64"},
      {"another target", replace("nvptx64-nvidia-cuda", "amdgcn-amd-amdhsa"), "clang -cc1 -triple nvptx64"},
      // clang expands @FILE in option values too: no argument may start with '@'.
      {"a response file as -target-cpu", replace("sm_80", "@/etc/kcache/tokens"), "starts with '@'"},
      {"a response file as -main-file-name", replace("saxpy.cu", "@rsp"), "starts with '@'"},
      {"a response file as -ferror-limit", replace("19", "@rsp"), "starts with '@'"},
      {"a second -triple", [](StepSpec& s) { s.args.insert(s.args.begin() + 1, {"-triple", "nvptx64-nvidia-cuda"}); },
       "is given twice"},
      {"a host CPU as -target-cpu", replace("sm_80", "x86-64"), "is not an SM arch"},
      {"words after a limit", replace("19", "19 -o /tmp/x"), "is not a number"},
      {"a path as the main file", replace("saxpy.cu", "/etc/passwd"), "is not a plain file name"},
      {"an odd relocation model", replace("static", "-load"), "is not a relocation model"},
      {"a feature that is no word", replace("+ptx88", "ptx88 -load"), "is not a target feature"},
      {"an aux triple with a path", replace("x86_64-pc-linux-gnu", "../x"), "is not a target triple"},
  };
  for (const Case& c : cases) {
    StepSpec s = clang_step();
    c.change(s);
    auto checked = check_step(s);
    ASSERT_FALSE(checked) << c.what;
    EXPECT_NE(checked.error().message.find(c.expect), std::string::npos) << c.what << ": " << checked.error().message;
  }
  // A response file (@name) or the libdevice name cannot be a step's file.
  StepSpec response = clang_step();
  response.inputs = {"@f0.cui"};
  *std::find(response.args.begin(), response.args.end(), "f0.cui") = "@f0.cui";
  EXPECT_FALSE(check_step(response));
  StepSpec named = clang_step();
  named.outputs = {"libdevice.10.bc"};
  EXPECT_FALSE(check_step(named));
}

// cicc and clang obey #include and #embed even in preprocessed input: text that could make them
// read a file of the daemon's host is refused, however it is spelled; what preprocessors write
// passes.
TEST(Steps, APreprocessedInputThatWouldReadAFileIsRefused) {
  const std::string preprocessed =
      "# 1 \"saxpy.cu\"\n# 1 \"<built-in>\" 1\n# 12 \"/usr/include/stdio.h\" 3 4\n#line 40 \"k.cu\"\n"
      "#pragma GCC diagnostic push\n#pragma unroll 4\n  #  pragma nv_diag_suppress 20012\n#\n"
      "const char* url = \"http://x\"; // a # and an #include in a comment\n"
      "__attribute__((global)) void k(float* x) { x[0] = 1; }\n";
  for (StepTool tool : {StepTool::cicc, StepTool::clang}) {
    EXPECT_TRUE(check_step_input(tool, "f0.ii", preprocessed)) << check_step_input(tool, "f0.ii", preprocessed).error().message;
  }
  struct Case {
    const char* what;
    std::string text;
    std::string expect;
  };
  std::vector<Case> cases = {
      {"#include", "#include \"/etc/shadow\"\n", "#include directive"},
      {"indented", "int x;\n   #   include </etc/shadow>\n", "line 2: it holds a #include directive"},
      {"a digraph", "%:include \"/etc/shadow\"\n", "#include directive"},
      {"a splice", "#\\\ninclude \"/etc/shadow\"\n", "#include directive"},
      {"a splice with blanks", "# \\  \r\ninclude \"/etc/shadow\"\n", "#include directive"},
      {"a comment before it", "/**/ #include \"/etc/shadow\"\n", "block comment"},
      {"#embed", "const char k[] = {\n#embed \"/etc/shadow\"\n};\n", "#embed directive"},
      {"#include_next", "#include_next <x.h>\n", "#include_next directive"},
      {"#import", "#import \"x\"\n", "#import directive"},
      {"__has_include", "#if __has_include(\"/etc/shadow\")\n#endif\n", "#if directive"},
      {"#define", "#define X 1\n", "#define directive"},
      {"a dependency pragma", "#pragma GCC dependency \"/etc/shadow\"\n", "#pragma names a file"},
      {"a _Pragma", "_Pragma(\"GCC dependency \\\"/etc/shadow\\\"\") int x;\n", "_Pragma names a file"},
      {"a module pragma", "#pragma clang module import x\n", "#pragma names a file"},
      {"a trigraph", "??=include \"/etc/shadow\"\n", "trigraph"},
      // Where clang and cicc see a line start that a split on LF does not.
      {"a lone CR", "int x;\r#include \"/etc/shadow\"\n", "line 1: it holds a CR that does not end a line"},
      {"a NUL before #", std::string("int x;\n\0#include \"/etc/shadow\"\n", 31), "line 2: it holds a NUL byte"},
      {"U+00A0 before #", "int x;\n\xc2\xa0#include \"/etc/shadow\"\n", "line 2: a non-ASCII byte comes before its '#'"},
      {"U+3000 before #", "\xe3\x80\x80 #embed \"/etc/shadow\"\n", "line 1: a non-ASCII byte comes before its '#'"},
      {"a backslash-CR splice", "int x; /\\\r* */ #include \"/etc/shadow\"\n", "CR that does not end a line"},
  };
  for (const Case& c : cases) {
    for (StepTool tool : {StepTool::cicc, StepTool::clang}) {
      auto checked = check_step_input(tool, "f0.ii", c.text);
      ASSERT_FALSE(checked) << c.what;
      EXPECT_EQ(checked.error().code, ErrorCode::k_invalid_argument);
      EXPECT_NE(checked.error().message.find(c.expect), std::string::npos) << c.what << ": " << checked.error().message;
    }
  }
  EXPECT_TRUE(check_step_input(StepTool::ptxas, "f0.ptx", "#include \"x\"\n")) << "ptxas reads no file from PTX";
  // CRLF line ends and non-ASCII text elsewhere are what real preprocessed files hold.
  for (StepTool tool : {StepTool::cicc, StepTool::clang}) {
    EXPECT_TRUE(check_step_input(tool, "f0.ii", "# 1 \"k.cu\"\r\nconst char* s = \"\xc3\xa9#\";\r\n"));
  }
  StepSpec trigraphs = clang_step();
  trigraphs.args.push_back("-ftrigraphs");
  EXPECT_FALSE(check_step(trigraphs));
}

// A host compile the daemon runs from the launcher's text: the compiler's flags only, nothing
// that names a file or loads code.
TEST(Steps, AHostCompileRunsOnTheDaemonWithItsFlagsOnly) {
  StepSpec host;
  host.tool = StepTool::host;
  host.args = {"-x", "c++", "-m64", "-Wno-psabi", "-O2", "-fPIC", "-std=c++17", "-fpreprocessed", "-fdirectives-only"};
  host.inputs = {"tmpxft_00000000_00000000-6_k.cudafe1.cpp"};
  host.outputs = {"object"};
  EXPECT_TRUE(check_step(host));
  EXPECT_TRUE(check_host_run(host)) << check_host_run(host).error().message;
  for (std::vector<std::string> extra : std::vector<std::vector<std::string>>{
           {"-fplugin=evil.so"}, {"-B", "x"}, {"-Bx"}, {"-specs=x"}, {"-wrapper", "x"}, {"-I/usr/include"},
           {"-idirafter", "x"}, {"-o", "x"}, {"-MD"}, {"-save-temps"}, {"-fdump-tree-all"}, {"k.cpp"},
           {"-fprofile-generate"}, {"-x", "assembler"}, {"-Wl,-rpath"}, {"-fmacro-prefix-map=a=b"}, {"--sysroot=x"}}) {
    StepSpec s = host;
    s.args.insert(s.args.end(), extra.begin(), extra.end());
    EXPECT_FALSE(check_host_run(s)) << extra.front();
  }
  StepSpec two = host;
  two.inputs.push_back("other.cpp");
  EXPECT_FALSE(check_host_run(two));
  StepSpec response = host;
  response.args.push_back("@rsp");
  EXPECT_FALSE(check_step(response));
}

// clang's host side of a CUDA compile, as the launcher sends it (clang++-22 -### for sm_80 at
// -O2, less the preprocessor's options): the daemon runs clang -cc1 ARGS -o object host.cui.
TEST(Steps, ClangsHostSideRunsOnTheDaemonWithItsDeviceImageOnly) {
  StepSpec host;
  host.tool = StepTool::host;
  host.args = {"-cc1", "-triple", "x86_64-pc-linux-gnu", "-target-sdk-version=12.9", "-fcuda-allow-variadic-functions",
               "-aux-triple", "nvptx64-nvidia-cuda", "-O2", "-emit-obj", "-disable-free", "-clear-ast-before-backend",
               "-disable-llvm-verifier", "-discard-value-names", "-main-file-name", "h.cu", "-mrelocation-model", "pic",
               "-pic-level", "2", "-pic-is-pie", "-mframe-pointer=none", "-fmath-errno", "-ffp-contract=on",
               "-fno-rounding-math", "-mconstructor-aliases", "-funwind-tables=2", "-target-cpu", "x86-64", "-tune-cpu",
               "generic", "-debugger-tuning=gdb", "-fdeprecated-macro", "-ferror-limit", "19", "--offload-new-driver",
               "-fgnuc-version=4.2.1", "-fskip-odr-check-in-gmf", "-fcxx-exceptions", "-fexceptions", "-vectorize-loops",
               "-vectorize-slp", "-fcuda-include-gpubinary", "f1.fatbin", "-cuid=34dc785620d43056", "-faddrsig",
               "-fdwarf2-cfi-asm", "-x", "cuda-cpp-output"};
  host.inputs = {"host.cui", "f1.fatbin"};
  host.outputs = {"object"};
  ASSERT_TRUE(check_step(host)) << check_step(host).error().message;
  ASSERT_TRUE(check_host_run(host)) << check_host_run(host).error().message;
  EXPECT_TRUE(is_embedded_step_input(host, "f1.fatbin"));
  EXPECT_FALSE(is_embedded_step_input(host, "host.cui")) << "the text is always read as text";
  struct Case {
    std::vector<std::string> extra;
    const char* why;
  };
  for (const Case& c : std::vector<Case>{
           {{"-triple", "x86_64-pc-linux-gnu"}, "a second -triple"},
           {{"-aux-triple", "nvptx64-nvidia-cuda"}, "a second -aux-triple"},
           {{"-load", "p.so"}, "a plugin"},
           {{"-fplugin=p.so"}, "a plugin"},
           {{"-resource-dir", "/usr/lib/llvm-22/lib/clang/22"}, "a path"},
           {{"-include", "x.h"}, "a file read"},
           {{"-internal-isystem", "/usr/include"}, "a folder read"},
           {{"-o", "/tmp/x.o"}, "an output of its own"},
           {{"host.cui"}, "the input named twice"},
           {{"-fembed-offload-object=other.out"}, "an undeclared image"},
           {{"-fcuda-include-gpubinary", "host.cui"}, "the text as an image"},
           {{"-x", "c++"}, "not preprocessed CUDA"},
           {{"-target-cpu", "../x"}, "not a CPU"},
           {{"-fdebug-compilation-dir=/home"}, "a path"},
           {{"-mllvm", "-debug-pass-file=x"}, "an LLVM option kcache does not pass"},
       }) {
    StepSpec s = host;
    s.args.insert(s.args.end(), c.extra.begin(), c.extra.end());
    EXPECT_FALSE(check_step(s) && check_host_run(s)) << c.why << ": " << c.extra.front();
  }
  StepSpec device_triple = host;
  device_triple.args[2] = "nvptx64-nvidia-cuda";
  EXPECT_FALSE(check_host_run(device_triple)) << "the device triple is not the host's";
  StepSpec stray = host;
  stray.inputs.push_back("other.bin");
  EXPECT_FALSE(check_host_run(stray)) << "an input no -fcuda-include-gpubinary names";
  StepSpec response = host;
  response.args[14] = "@h.cu";
  EXPECT_FALSE(check_step(response)) << "a response file as -main-file-name's value";
}

// GCC's -fdirectives-only text keeps macros and comments: #define and #undef pass, and a comment
// or a literal can neither hide a directive nor make one.
TEST(Steps, AHostCompilesTextIsReadWithoutItsCommentsAndLiterals) {
  const std::string ok =
      "# 1 \"k.cu\"\n#define K 3 /* three */\n#undef K\n// #include \"/etc/shadow\" in a comment\n"
      "/* a comment\n#include \"/etc/shadow\"\n over lines */ int x;\n"
      "const char* s = \"/* not a comment\";\nconst char* r = R\"x(\n#include \"/etc/shadow\"\n)x\";\n"
      "char c = '\"'; int d = 1'000;\n";
  EXPECT_TRUE(check_step_input(StepTool::host, "k.cpp", ok)) << check_step_input(StepTool::host, "k.cpp", ok).error().message;
  struct Case {
    const char* what;
    std::string text;
  };
  const std::vector<Case> refused = {
      {"after a comment", "/* */ #include \"/etc/shadow\"\n"},
      {"after a comment that spans lines", "/*\n*/ #include \"/etc/shadow\"\n"},
      {"after a string that looks like a comment's start", "const char* s = \"/*\";\n#include \"/etc/shadow\"\n"},
      {"after a raw string whose quote ends nothing", "auto r = R\"x( \" /* )x\";\n#include \"/etc/shadow\"\n"},
      {"after a digit separator", "int d = 1'0; /* '\n#include \"/etc/shadow\"\n"},
      {"#embed", "#embed \"/etc/shadow\"\n"},
      {"__has_include", "#if __has_include(\"/etc/shadow\")\n#endif\n"},
  };
  for (const Case& c : refused) EXPECT_FALSE(check_step_input(StepTool::host, "k.cpp", c.text)) << c.what;
  // cicc and clang read fully preprocessed text: a #define there is still refused.
  EXPECT_FALSE(check_step_input(StepTool::cicc, "k.ii", "#define K 3\n"));
}

TEST(Steps, EveryPartOfAStepIsInItsKey) {
  Digest a = sha256("a"), b = sha256("b");
  StepSpec base = cicc_step();
  std::vector<Digest> inputs = {a, b};
  Key key = compute_step_key(base, inputs);
  EXPECT_EQ(key, compute_step_key(cicc_step(), inputs));
  std::vector<StepSpec> changed(6, base);
  changed[0].tool = StepTool::ptxas;
  changed[5].tool = StepTool::clang;
  changed[1].tool_digest = sha256("another cicc");
  changed[2].args[11] = "compute_90";
  changed[3].outputs.pop_back();
  changed[4].inputs = {"f0.module_id", "g4.ii"};
  for (const StepSpec& s : changed) EXPECT_NE(compute_step_key(s, inputs), key);
  std::vector<Digest> other_bytes = {a, a};
  EXPECT_NE(compute_step_key(base, other_bytes), key);
  // Not a compile key of anything: another domain.
  EXPECT_NE(step_tool_identity(StepTool::cicc, inputs), step_tool_identity(StepTool::ptxas, inputs));
}

// The launcher builds its Step requests through wire::step_request, which the daemon reads back
// with wire::step_ask: the same spec, device inputs by their bytes, a host entry's by digest.
TEST(Steps, ARequestIsReadBackAsItsSpec) {
  StepSpec spec;
  spec.tool = StepTool::ptxas;
  spec.tool_digest = sha256("ptxas");
  spec.args = {"-arch=sm_80", "f0.ptx", "-o", "f1.cubin"};
  spec.inputs = {"f0.ptx"};
  spec.outputs = {"f1.cubin"};
  const std::vector<std::string> contents = {".version 8.0\n.target sm_80\n.address_size 64\n"};
  v1::StepRequest request = wire::step_request(spec, contents);
  auto ask = wire::step_ask(request);
  ASSERT_TRUE(ask) << ask.error().message;
  EXPECT_EQ(ask->spec.tool, spec.tool);
  EXPECT_EQ(ask->spec.tool_digest, spec.tool_digest);
  EXPECT_EQ(ask->spec.args, spec.args);
  EXPECT_EQ(ask->spec.inputs, spec.inputs);
  EXPECT_EQ(ask->spec.outputs, spec.outputs);
  ASSERT_EQ(ask->inputs.size(), 1u);
  EXPECT_EQ(ask->inputs[0], contents[0]);

  StepSpec host = spec;
  host.tool = StepTool::host;
  host.args = {"-O2", "-fpreprocessed", "-fdirectives-only"};
  host.inputs = {"k.cudafe1.cpp"};
  host.outputs = {std::string(k_step_object)};
  const Digest text = sha256("the unit's text");
  auto looked = wire::step_ask(wire::step_request(host, {}, std::span(&text, 1)));
  ASSERT_TRUE(looked) << looked.error().message;
  EXPECT_TRUE(looked->inputs.empty()) << "looked up by digest, no bytes sent";
  ASSERT_EQ(looked->input_digests.size(), 1u);
  EXPECT_EQ(looked->input_digests[0], text);
}

TEST(NvccPlan, ShellWordsAreReadAsShReadsThem) {
  std::map<std::string, std::string> vars = {{"CICC_PATH", "/cuda/nvvm/bin"}, {"EMPTY", ""}};
  auto words = launcher::shell_words(R"("$CICC_PATH/cicc" -a "two words" 'it''s' a\ b "q\"uote" ${EMPTY}x $CICC_PATH)", vars);
  ASSERT_TRUE(words) << words.error().message;
  std::vector<std::string> expect = {"/cuda/nvvm/bin/cicc", "-a", "two words", "its", "a b", "q\"uote", "x", "/cuda/nvvm/bin"};
  EXPECT_EQ(*words, expect);
  for (const char* refused : {"a; rm -rf /", "a | b", "`id`", "a > b", "\"unclosed", "x*", "$(id)"}) {
    EXPECT_FALSE(launcher::shell_words(refused, vars)) << refused;
  }
}

TEST(NvccPlan, APlanBecomesStepsWithItsVariables) {
  std::string dryrun =
      "nvcc warning : some message of nvcc's own\n"
      "#$ _NVVM_BRANCH_=nvvm\n"
      "#$ CICC_PATH=/cuda/bin/../nvvm/bin\n"
      "#$ INCLUDES=\"-I/cuda/include\"  \n"
      "#$ gcc -E -x c++ \"a b.cu\" -o \"/t/tmpxft_1-5_a.cpp4.ii\" \n"
      "#$ -- Filter Dependencies -- > out/a.d\n"
      "#$ \"$CICC_PATH/cicc\" --c++17 \"/t/in.ii\" -o \"/t/out.ptx\"\n"
      "#$ rm /t/x.fatbin\n";
  std::map<std::string, std::string> vars;
  auto steps = launcher::parse_plan(dryrun, vars);
  ASSERT_TRUE(steps) << steps.error().message;
  ASSERT_EQ(steps->size(), 7u);
  EXPECT_EQ((*steps)[2].value, "-I/cuda/include");
  EXPECT_EQ((*steps)[3].argv[4], "a b.cu");
  EXPECT_EQ((*steps)[4].kind, launcher::PlanStep::Kind::filter_deps);
  EXPECT_EQ((*steps)[4].target, "out/a.d");
  EXPECT_EQ((*steps)[5].argv.front(), "/cuda/bin/../nvvm/bin/cicc");
  EXPECT_EQ((*steps)[6].kind, launcher::PlanStep::Kind::remove);
  EXPECT_EQ(vars["CICC_PATH"], "/cuda/bin/../nvvm/bin");
  std::map<std::string, std::string> none;
  EXPECT_FALSE(launcher::parse_plan("#$ gcc -E a.cu | tee x\n", none));
}

TEST(NvccPlan, TheDependencyFileIsNvccs) {
  // Two preprocessed outputs (a device pass and the host pass): every file once, in order of
  // first appearance, without <built-in> and <command-line>; spaces escaped for make.
  std::vector<std::string> texts = {
      "# 0 \"k.cu\"\n# 0 \"<built-in>\"\n# 0 \"<command-line>\"\n# 1 \"/usr/include/stdc-predef.h\" 1 3 4\n"
      "int x;\n# 1 \"sp ace/dev.h\" 1\n# 2 \"k.cu\" 2\n",
      "# 0 \"k.cu\"\n# 0 \"/build/dir//\"\n# 1 \"/usr/include/stdc-predef.h\" 1 3 4\n# 1 \"host\\\"only.h\" 1\n"};
  EXPECT_EQ(launcher::dependency_file("k.o", launcher::files_of_markers({texts[0], texts[1]}), false),
            "k.o : k.cu \\\n    /usr/include/stdc-predef.h \\\n    sp\\ ace/dev.h \\\n    host\"only.h\n");
  EXPECT_EQ(launcher::dependency_file("t", launcher::files_of_markers({texts[0]}), true),
            "t : k.cu \\\n    /usr/include/stdc-predef.h \\\n    sp\\ ace/dev.h\n"
            "\n/usr/include/stdc-predef.h:\n\nsp\\ ace/dev.h:\n");
}

}  // namespace
}  // namespace kcache
