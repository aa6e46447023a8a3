// Finding a program as PATH finds it: the one search the launcher, the daemon's processes and
// the masquerade (kcache installed as `nvcc` or `g++` early on PATH) share.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace kcache {

// The PATH a process without one searches (as execvp's confstr(_CS_PATH), with /usr/local/bin).
inline constexpr std::string_view k_default_path = "/usr/local/bin:/usr/bin:/bin";

// `name` as the PATH list `path` finds it: the first candidate that is an executable file and
// that `skip` (when given) does not pass over; an empty entry is the current folder, as execvp
// reads it. A name with a '/' is itself. Empty when none.
std::string search_path(std::string_view name, std::string_view path,
                        const std::function<bool(const std::filesystem::path&)>& skip = {});

}  // namespace kcache
