// clang's own plan for a CUDA compile, as `clang++ -###` prints it, read into commands the
// launcher runs one by one, and the split of each cc1 line into its preprocessing (here) and its
// compile of the preprocessed text (a step on the daemon, or the host entry). Toolkit-free: the
// unit tests plan from recorded outputs (tests/data/launcher/plans/*.clang).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kcache::launcher {

struct ClangPlan {
  std::vector<std::vector<std::string>> commands;  // in order, each a program and its arguments
  std::string driver_diagnostics;                  // the driver's own warnings, which the compile prints
  std::string source;                              // the one source its cc1 lines compile
};
// The commands of `clang -###`'s output, or why the launcher does not run them itself (a program
// it does not know, several sources, nothing to run).
struct ClangPlanOrReason {
  std::optional<ClangPlan> plan;
  std::string reason;
};
ClangPlanOrReason read_clang_plan(std::string_view dry_run_output);

// One arch's device compile to PTX (cc1 -fcuda-is-device -S for nvptx64), and the host side's
// compile to an object.
bool is_device_compile(const std::vector<std::string>& argv);
bool is_host_compile(const std::vector<std::string>& argv);

// Every -cuid= of the plan set to one name of the unit: its source's path (relative to a base
// folder where given), so a second build folder, an arch dropped or a host-only edit keep each
// arch's device compile. `unit_path` is that path.
void name_the_unit(ClangPlan& plan, std::string_view unit_path);

// A cc1 line split in two: `preprocess` writes the preprocessed text to `text` (and, when `deps`,
// the dependency file, to `dependency_file` where the line names one: the caller stages it at
// `dependency_target`); `compile` compiles that text (-x cuda-cpp-output) to `output`, without the
// preprocessor's options. `action` is the line's (-S, -emit-obj).
struct ClangSplit {
  std::vector<std::string> preprocess, compile;
  std::string dependency_target;
};
ClangSplit split_cc1(const std::vector<std::string>& argv, std::string_view action, const std::string& text, bool deps,
                     const std::string& output, const std::string& dependency_file);

// clang's device link (-fgpu-rdc, linked with --offload-link through clang-linker-wrapper): each
// arch's nvlink, as clang-nvlink-wrapper runs it (nvlink -o IMAGE -arch sm_80 -L DIR ... INPUT.cubin
// ...; kcache stands in for nvlink there: clang_link.cpp), as a device step. `argv`: the step's
// line, in the spellings the daemon reads (-arch=sm_80, -LDIR; nvlink writes its options into the
// image as it reads them, whatever their spelling), with `output` and each of `inputs` (from, to)
// named in the work folder; `output` is the image's place. `refusal`: why nvlink runs here (an
// option it does not take, a library, an input that is not a cubin).
struct ClangNvlink {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> inputs;
  std::string output;
  std::string refusal;
};
ClangNvlink plan_clang_nvlink(const std::vector<std::string>& argv, std::string_view work);

}  // namespace kcache::launcher
