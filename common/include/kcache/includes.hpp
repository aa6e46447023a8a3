// The #include directives of a CUDA C++ file, as the preprocessor sees them (line splices joined,
// comments gone, the `%:` digraph read as `#`). The daemon checks them before NVRTC runs
// (check_includes, here); the client follows them to collect the headers a source
// job sends (client/src/source_headers.cpp). Neither runs the preprocessor: a directive inside an
// #if 0 block counts too.
#pragma once

#include <cstddef>
#include <utility>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/expected.hpp"

namespace kcache {

struct IncludeDirective {
  std::size_t line = 0;      // 1-based
  std::string text;          // the whole directive, for messages (at most 200 bytes)
  std::string name;          // what it names, between the quotes or angle brackets
  bool angled = false;       // <name> rather than "name"
  bool computed = false;     // names no "file" or <file> (a macro, or malformed): name is empty
  bool has_include = false;  // __has_include(...) rather than a directive
};

// Every #include, #include_next, #import and #embed directive of `text`, and every
// __has_include / __has_include_next operand, in order.
std::vector<IncludeDirective> include_directives(std::string_view text);

// Whether an include name could reach a file outside the folders it is looked up in: absolute,
// or with a `..` part (either slash).
bool include_reaches_out(std::string_view name);

// Refuses an #include (or __has_include) in a job's source or headers that could make the
// compiler read a file of the daemon's: an absolute name, a name with a `..` part, or a computed
// one (a macro). INVALID_ARGUMENT naming the file, line and directive. The daemon checks every
// CUDA C++ job so before its key is computed, and again in the worker before NVRTC runs.
Expected<void> check_includes(std::string_view source_name, std::string_view source,
                              const std::vector<std::pair<std::string_view, std::string_view>>& headers);

}  // namespace kcache
