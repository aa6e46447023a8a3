#include "kcache/includes.hpp"

namespace kcache {
namespace {

// The text the preprocessor sees: line splices joined, comments replaced by a space (a block
// comment keeps its newlines, so line numbers hold), string and character literals kept. A
// literal never runs past its line (only raw strings could, and a directive starts a line).
std::string preprocessor_view(std::string_view text) {
  std::string joined;
  joined.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\') {
      std::size_t j = i + 1;
      if (j < text.size() && text[j] == '\r') ++j;
      if (j < text.size() && text[j] == '\n') {
        i = j;
        continue;
      }
    }
    joined += text[i];
  }
  enum class State { code, string, character, line_comment, block_comment } state = State::code;
  std::string out;
  out.reserve(joined.size());
  for (std::size_t i = 0; i < joined.size(); ++i) {
    char c = joined[i];
    char next = i + 1 < joined.size() ? joined[i + 1] : '\0';
    switch (state) {
      case State::code:
        if (c == '/' && next == '/') {
          state = State::line_comment;
          out += ' ';
          ++i;
        } else if (c == '/' && next == '*') {
          state = State::block_comment;
          out += ' ';
          ++i;
        } else {
          if (c == '"') state = State::string;
          if (c == '\'') state = State::character;
          out += c;
        }
        break;
      case State::string:
      case State::character:
        out += c;
        if (c == '\\' && next != '\n' && next != '\0') {
          out += next;
          ++i;
        } else if (c == '\n' || (state == State::string && c == '"') || (state == State::character && c == '\'')) {
          state = State::code;
        }
        break;
      case State::line_comment:
        if (c == '\n') {
          out += c;
          state = State::code;
        }
        break;
      case State::block_comment:
        if (c == '\n') out += c;
        if (c == '*' && next == '/') {
          state = State::code;
          ++i;
        }
        break;
    }
  }
  return out;
}

constexpr std::string_view k_space = " \t\r\f\v";

// The operand of a directive or of __has_include, from its first non-blank character.
void read_operand(std::string_view operand, IncludeDirective& d) {
  std::size_t o = operand.find_first_not_of(k_space);
  if (o == std::string_view::npos) {
    d.computed = true;
    return;
  }
  operand = operand.substr(o);
  char close = operand.front() == '"' ? '"' : operand.front() == '<' ? '>' : '\0';
  std::size_t close_at = close == '\0' ? std::string_view::npos : operand.find(close, 1);
  if (close_at == std::string_view::npos) {
    d.computed = true;
    return;
  }
  d.angled = close == '>';
  d.name = std::string(operand.substr(1, close_at - 1));
}

}  // namespace

bool include_reaches_out(std::string_view name) {
  if (name.empty() || name.front() == '/' || name.front() == '\\') return true;
  std::size_t start = 0;
  while (start <= name.size()) {
    std::size_t end = name.find_first_of("/\\", start);
    if (end == std::string_view::npos) end = name.size();
    if (name.substr(start, end - start) == "..") return true;
    start = end + 1;
  }
  return false;
}

std::vector<IncludeDirective> include_directives(std::string_view text) {
  std::string view = preprocessor_view(text);
  std::vector<IncludeDirective> out;
  std::size_t line_number = 0;
  for (std::size_t pos = 0; pos <= view.size();) {
    std::size_t end = view.find('\n', pos);
    if (end == std::string::npos) end = view.size();
    std::string_view line(view.data() + pos, end - pos);
    ++line_number;
    pos = end + 1;
    std::string text_of_line(line.substr(0, 200));
    for (std::size_t at = line.find("__has_include"); at != std::string_view::npos;
         at = line.find("__has_include", at + 1)) {
      std::size_t open = line.find('(', at);
      if (open == std::string_view::npos) continue;
      IncludeDirective d{line_number, text_of_line, {}, false, false, true};
      read_operand(line.substr(open + 1), d);
      out.push_back(std::move(d));
    }
    std::size_t i = line.find_first_not_of(k_space);
    if (i == std::string_view::npos) continue;
    if (line[i] == '#') {
      ++i;
    } else if (line.substr(i, 2) == "%:") {
      i += 2;
    } else {
      continue;
    }
    i = line.find_first_not_of(k_space, i);
    if (i == std::string_view::npos) continue;
    std::string_view rest = line.substr(i);
    for (std::string_view keyword : {"include_next", "include", "import", "embed"}) {
      if (!rest.starts_with(keyword)) continue;
      IncludeDirective d{line_number, text_of_line, {}, false, false, false};
      read_operand(rest.substr(keyword.size()), d);
      out.push_back(std::move(d));
      break;
    }
  }
  return out;
}

namespace {

Expected<void> check_file(std::string_view file, std::string_view text) {
  for (const IncludeDirective& d : include_directives(text)) {
    auto refuse = [&](const std::string& why) {
      return make_error(ErrorCode::k_invalid_argument,
                        std::string(file) + ":" + std::to_string(d.line) + ": '" + d.text + "' " + why);
    };
    if (d.computed && !d.has_include) {
      return refuse("is a computed include (a macro) or malformed: a job's includes spell their header as "
                    "\"name\" or <name>");
    }
    if (!d.computed && include_reaches_out(d.name)) {
      return refuse("names a file by an absolute path or through '..': the daemon reads no file of its own for a "
                    "job; send the header with the job under a relative name");
    }
  }
  return {};
}

}  // namespace

Expected<void> check_includes(std::string_view source_name, std::string_view source,
                              const std::vector<std::pair<std::string_view, std::string_view>>& headers) {
  if (auto ok = check_file(source_name, source); !ok) return ok;
  for (const auto& [name, bytes] : headers) {
    if (auto ok = check_file(name, bytes); !ok) return ok;
  }
  return {};
}

}  // namespace kcache
