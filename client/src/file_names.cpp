#include "file_names.hpp"

#include <cstdio>
#include <string>

namespace kcache {
namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '+' || c == '-' || c == ':';  // ':' for AMD target IDs: gfx90a:xnack-.hsaco, as ROCm names them
}

}  // namespace

bool is_safe_file_name_part(std::string_view part) {
  if (part.empty() || part.size() > k_max_file_name_part) return false;
  if (part.front() == '.' || part.front() == '-') return false;
  if (part.find("..") != std::string_view::npos) return false;
  for (char c : part) {
    if (!is_name_char(c)) return false;
  }
  return true;
}

Expected<void> check_file_name_part(std::string_view what, std::string_view part) {
  if (is_safe_file_name_part(part)) return {};
  return make_error(ErrorCode::k_invalid_argument,
                    std::string(what) + " " + quote_for_message(part) +
                        " is not a safe file name (1 to 128 characters from A-Z a-z 0-9 _ . + - :, not starting with "
                        "'.' or '-', no \"..\"): refusing to write it");
}

std::string quote_for_message(std::string_view text) {
  constexpr std::size_t k_shown = 64;
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size() && i < k_shown; ++i) {
    auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += text.size() > k_shown ? "\"..." : "\"";
  return out;
}

}  // namespace kcache
