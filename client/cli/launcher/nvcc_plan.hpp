// nvcc's own plan for a compile, as `nvcc --dryrun` prints it ("#$ " lines on stderr), read into
// steps the launcher runs one by one. The lines are shell syntax: words in double or single
// quotes, backslash escapes, $NAME and ${NAME} from the variables the plan sets before. Anything
// else (pipes, globs, command substitution) is refused: the launcher then runs nvcc unchanged.
#pragma once

#include <map>
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

// The dependency file nvcc writes for -MD/-M: `target` depending on every file the preprocessed
// outputs' line markers name (the first of them is the source), in order of first appearance,
// without <built-in> and <command-line>; with `phony` (-MP) a rule of its own for each header.
std::string dependency_file(std::string_view target, const std::vector<std::string>& preprocessed, bool phony);

}  // namespace kcache::launcher
