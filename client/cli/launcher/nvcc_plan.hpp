// nvcc's own plan for a compile, as `nvcc --dryrun` prints it ("#$ " lines on stderr), read into
// steps the launcher runs one by one. The lines are shell syntax: words in double or single
// quotes, backslash escapes, $NAME and ${NAME} from the variables the plan sets before. Anything
// else (pipes, globs, command substitution) is refused: the launcher then runs nvcc unchanged.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/expected.hpp"

namespace kcache::launcher {

struct PlanStep {
  enum class Kind {
    assign,       // NAME=VALUE: set for every later step
    run,          // a program and its arguments
    remove,       // rm FILES
    filter_deps,  // "-- Filter Dependencies -- > FILE": nvcc writes the dependency file itself
  };
  Kind kind = Kind::run;
  std::string name, value;        // assign
  std::vector<std::string> argv;  // run: the words; remove: the files
  std::string target;             // filter_deps: the file written
};

// The steps of a dry run's output. `vars` holds the variables known before it (the launcher's
// environment) and gains the plan's assignments as they come, so later lines expand them.
Expected<std::vector<PlanStep>> parse_plan(std::string_view dryrun_output, std::map<std::string, std::string>& vars);

// The words of one shell line, expanded with `vars` (an unknown name expands to nothing, as in
// sh). INVALID_ARGUMENT for syntax the launcher does not run itself.
Expected<std::vector<std::string>> shell_words(std::string_view line, const std::map<std::string, std::string>& vars);

// The files the preprocessed outputs' line markers name (the first of them is the source), in
// order of first appearance, without <built-in> and <command-line>.
std::vector<std::string> files_of_markers(const std::vector<std::string_view>& preprocessed);
// The dependency file nvcc writes for -MD/-M: `target` depending on `files` (files_of_markers);
// with `phony` (-MP) a rule of its own for each header.
std::string dependency_file(std::string_view target, const std::vector<std::string>& files, bool phony);

// nvcc's temporary names carry its process ID and a counter (tmpxft_0000a1b2_00000000-6_a.ptx);
// written as one fixed name (tmpxft_00000000_00000000-6_a.ptx), the same work has the same names,
// and so the same key and bytes.
std::string fixed_temporary_names(std::string word);

// Whether a plan's step runs a host compiler on its own preprocessed output (-E).
bool is_preprocessor(const PlanStep& step);
// Whether a host compiler's arguments compile cudafe++'s output in the work folder `work` (the
// plan's host compile, whose object the launcher keeps).
bool is_host_compile(const std::vector<std::string>& argv, std::string_view work);

// Why the launcher does not run a plan itself (a program it does not know; more than one host
// compile, from a source the option table did not see); nullopt when it runs it.
std::optional<std::string> plan_refusal(const std::vector<PlanStep>& steps, std::string_view work);

// Where the host compile writes the object, when the whole compile (StepTool::nvcc) can be looked
// up: a plan whose assignments all come first, with preprocessors and one host compile, without
// debug information (which names the work folder); empty otherwise.
std::string whole_compile_target(const std::vector<PlanStep>& steps, std::string_view work);

// nvcc's device link (nvcc -dlink), its nvlink line as the daemon runs it (a Step of tool nvlink):
// each object and archive it links given a work folder name (`inputs`: the build's file and its
// name there, for the launcher to link), everything else as the plan has it: nvlink writes its
// options, -L folders included, into the cubin, so the daemon runs them as they are, where they
// name its own toolkit's folders (the launcher runs nvlink itself where they do not). -lcudadevrt
// must be found in those folders (its archive's digest is in nvlink's identity); a library of
// device code other than it refuses the step (`refusal`: nvlink then runs here, as the plan has
// it). `exists` says whether a file is there.
// The archive -l`name` links from `folders` (-L, in order), as nvlink finds it: the first
// lib`name`.a there; empty when none.
std::string find_archive(const std::vector<std::string>& folders, std::string_view name,
                         const std::function<bool(const std::string&)>& exists);

struct NvlinkStep {
  std::vector<std::string> argv;
  std::vector<std::pair<std::string, std::string>> inputs;
  std::string cudadevrt;  // the libcudadevrt.a -lcudadevrt names
  std::string refusal;
};
NvlinkStep plan_nvlink(const std::vector<std::string>& argv, std::string_view work,
                       const std::function<bool(const std::string&)>& exists);

// The host compile of cudafe++'s output, split for its host entry: `compile` writes `object`
// in place of the plan's output (`target`); `preprocess` writes its translation unit to `text`
// (GCC: -fdirectives-only, includes and conditionals done, macros left, which GCC compiles with
// -fpreprocessed -fdirectives-only into the very bytes of the plan's compile); `key_args` are
// what changes the object beyond that text (no preprocessor option, no path of the work folder);
// `input_name` names the text as the object's FILE symbol does (the cudafe1.cpp's name).
struct HostSplit {
  std::vector<std::string> compile, preprocess, key_args;
  std::string input_name = "host.ii", target;
  bool debug = false;  // it asks for debug information
  bool gcc = false;    // a GCC driver (else clang's, which preprocesses fully)
};
HostSplit split_host_compile(const std::vector<std::string>& argv, std::string_view work, const std::string& object,
                             const std::string& text);

// Debug line information (cicc -generate-line-info, or --debug_mode under -G) names each file as
// cicc finds it: a relative line marker (# 1 "k.cu", as a Makefile names the source) joined to
// cicc's own folder. A cicc step that runs in a folder of its own must get the markers already
// joined to the build's folder `cwd`: absolute_line_markers does that, and returns the names it
// joined; relative_line_markers undoes exactly those in cicc's other outputs (the stub the host
// compile includes), which carry the markers on as nvcc's would.
bool asks_line_info(const std::vector<std::string>& cicc_argv);
std::string absolute_line_markers(std::string_view text, const std::string& cwd, std::vector<std::string>& joined);
std::string relative_line_markers(std::string_view text, const std::string& cwd, const std::vector<std::string>& joined);
// The folder cicc joins relative names to: $PWD where it names the current folder, else getcwd().
std::string cicc_folder();

// ptxas puts each source file's modification time and size in the line table, as a PTX .file
// directive gives them or, when it gives none (cicc's never do), as ptxas finds the file. A ptxas
// step runs where the build's files are not: its PTX gets them written in, from `stat` (seconds
// and bytes; nullopt for a file that is not there, left as it is).
struct FileStamp {
  long long mtime = 0, size = 0;
};
std::string stamped_file_directives(std::string_view ptx, const std::function<std::optional<FileStamp>(const std::string&)>& stat);

// cudafe++ names a unit's module ID (in the file cicc reads too) by its source's path and first
// external definition, or, where it needs the ID before any such definition (a -rdc unit whose
// templates use static device code first; mergeSort.cu), by the source's modification time and
// cudafe++'s own process ID (_crc_len_name_<hex8>_<pid>): then every compile of the unit differs.
// The ID of that form with its last two fields made from `unit` (a digest of the unit's inputs),
// so the same unit gets the same ID; nullopt for an ID of the stable form, kept as nvcc makes it.
std::optional<std::string> stable_module_id(std::string_view id, std::string_view unit);

}  // namespace kcache::launcher
