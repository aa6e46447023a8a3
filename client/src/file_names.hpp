// File names that kcache builds from values it did not choose: an image's arch or a key from a
// daemon's reply, or from a bundle index, written into --out-dir or a bundle. Such a value must
// never become a path (`/`, `..`), a hidden or option-like file, or an empty name.
#pragma once

#include <string>
#include <string_view>

#include "kcache/expected.hpp"

namespace kcache {

// The longest value accepted as one part of a file name (keys are 64 hex digits).
inline constexpr std::size_t k_max_file_name_part = 128;

// Whether `part` may be one component of a file name: 1 to k_max_file_name_part characters from
// [A-Za-z0-9_.+-], not starting with '.' or '-', and without "..".
bool is_safe_file_name_part(std::string_view part);

// OK, or INVALID_ARGUMENT naming `what` ("the daemon's image arch") and the value, quoted and cut
// short, and why it is refused.
Expected<void> check_file_name_part(std::string_view what, std::string_view part);

// `text` quoted for a message, pure ASCII: at most 64 bytes shown, control and non-ASCII bytes, quotes
// and backslashes as \xNN (a message may be printed inside JSON).
std::string quote_for_message(std::string_view text);

}  // namespace kcache
