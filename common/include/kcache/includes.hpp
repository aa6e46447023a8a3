// The #include directives of a CUDA C++ file, as the preprocessor sees them (line splices joined,
// comments gone, the `%:` digraph read as `#`). The daemon checks them before NVRTC runs
// (server/compile/source_pipeline.cpp); the client follows them to collect the headers a source
// job sends (client/src/source_headers.cpp). Neither runs the preprocessor: a directive inside an
// #if 0 block counts too.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

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

}  // namespace kcache
