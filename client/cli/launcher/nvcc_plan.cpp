#include "launcher/nvcc_plan.hpp"

#include "kcache/sha256.hpp"
#include "kcache/step.hpp"
#include "launcher/options.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <span>
#include <set>

namespace kcache::launcher {
namespace {

Error unsupported(std::string_view line, std::string_view why) {
  return make_error(ErrorCode::k_invalid_argument,
                    "nvcc's plan line '" + std::string(line.substr(0, 160)) + "' " + std::string(why));
}

bool name_char(char c, bool first) {
  return c == '_' || std::isalpha(static_cast<unsigned char>(c)) || (!first && std::isdigit(static_cast<unsigned char>(c)));
}

// Reads $NAME or ${NAME} at `i` (just past the '$'), appending its value.
bool expand(std::string_view line, std::size_t& i, const std::map<std::string, std::string>& vars, std::string& out) {
  std::string name;
  if (i < line.size() && line[i] == '{') {
    std::size_t close = line.find('}', i);
    if (close == std::string_view::npos) return false;
    name = std::string(line.substr(i + 1, close - i - 1));
    i = close + 1;
  } else {
    while (i < line.size() && name_char(line[i], name.empty())) name += line[i++];
  }
  if (name.empty()) return false;
  if (auto it = vars.find(name); it != vars.end()) out += it->second;
  return true;
}

}  // namespace

Expected<std::vector<std::string>> shell_words(std::string_view line, const std::map<std::string, std::string>& vars) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < line.size();) {
    char c = line[i];
    if (c == ' ' || c == '\t') {
      if (in_word) words.push_back(std::move(word)), word.clear(), in_word = false;
      ++i;
      continue;
    }
    in_word = true;
    if (c == '\'') {
      std::size_t close = line.find('\'', i + 1);
      if (close == std::string_view::npos) return unsupported(line, "has an unclosed quote");
      word += line.substr(i + 1, close - i - 1);
      i = close + 1;
    } else if (c == '"') {
      for (++i;; ++i) {
        if (i >= line.size()) return unsupported(line, "has an unclosed quote");
        char q = line[i];
        if (q == '"') break;
        if (q == '\\' && i + 1 < line.size() && std::string_view("\"\\$`").find(line[i + 1]) != std::string_view::npos) {
          word += line[++i];
        } else if (q == '$') {
          ++i;
          if (!expand(line, i, vars, word)) return unsupported(line, "has a '$' the launcher does not expand");
          --i;
        } else if (q == '`') {
          return unsupported(line, "substitutes a command");
        } else {
          word += q;
        }
      }
      ++i;
    } else if (c == '\\') {
      if (i + 1 < line.size()) word += line[i + 1];
      i += 2;
    } else if (c == '$') {
      ++i;
      std::string value;
      if (!expand(line, i, vars, value)) return unsupported(line, "has a '$' the launcher does not expand");
      if (value.find_first_of(" \t") != std::string::npos) return unsupported(line, "splits a variable into words");
      word += value;
    } else if (std::string_view("|&;<>()`*?[]{}~#").find(c) != std::string_view::npos) {
      return unsupported(line, "uses shell syntax the launcher does not run itself");
    } else {
      word += c;
      ++i;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

Expected<std::vector<PlanStep>> parse_plan(std::string_view dryrun_output, std::map<std::string, std::string>& vars) {
  std::vector<PlanStep> steps;
  constexpr std::string_view k_prefix = "#$ ";
  constexpr std::string_view k_filter = "-- Filter Dependencies --";
  for (std::size_t at = 0; at < dryrun_output.size();) {
    std::size_t end = dryrun_output.find('\n', at);
    if (end == std::string_view::npos) end = dryrun_output.size();
    std::string_view line = dryrun_output.substr(at, end - at);
    at = end + 1;
    if (!line.starts_with(k_prefix)) continue;  // nvcc's own messages
    line.remove_prefix(k_prefix.size());
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
    if (line.empty()) continue;
    PlanStep step;
    if (line.starts_with(k_filter)) {
      std::string_view rest = line.substr(k_filter.size());
      auto gt = rest.find('>');
      if (gt == std::string_view::npos) return unsupported(line, "writes dependencies to standard output");
      auto words = shell_words(rest.substr(gt + 1), vars);
      if (!words || words->size() != 1) return unsupported(line, "names no single dependency file");
      step.kind = PlanStep::Kind::filter_deps;
      step.target = words->front();
      steps.push_back(std::move(step));
      continue;
    }
    std::size_t name_end = 0;
    while (name_end < line.size() && name_char(line[name_end], name_end == 0)) ++name_end;
    if (name_end > 0 && name_end < line.size() && line[name_end] == '=') {
      auto words = shell_words(line.substr(name_end + 1), vars);
      if (!words) return words.error();
      step.kind = PlanStep::Kind::assign;
      step.name = std::string(line.substr(0, name_end));
      for (const std::string& w : *words) step.value += (step.value.empty() ? "" : " ") + w;
      vars[step.name] = step.value;
      steps.push_back(std::move(step));
      continue;
    }
    auto words = shell_words(line, vars);
    if (!words) return words.error();
    if (words->empty()) continue;
    if (words->front() == "rm") {
      step.kind = PlanStep::Kind::remove;
      // nvcc writes rm's one file unquoted, spaces and all (rm .../tmpxft_..._k s.fatbin).
      std::string_view rest = line.substr(line.find("rm") + 2);
      while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
      if (rest.find_first_of("'\"$\\") == std::string_view::npos) {
        step.argv = {std::string(rest)};
      } else {
        step.argv.assign(words->begin() + 1, words->end());
      }
    } else {
      step.argv = std::move(*words);
    }
    steps.push_back(std::move(step));
  }
  return steps;
}

namespace {

// The file names of a preprocessed output's line markers (# N "file" flags), as GCC escapes them.
// A name already seen is found without a copy of its own (a text names each header at every
// return to it: thousands of markers, a few hundred files).
void marked_files(std::string_view text, std::vector<std::string>& out, std::set<std::string, std::less<>>& seen) {
  std::string unescaped;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (line.size() < 5 || line[0] != '#' || line[1] != ' ' || !std::isdigit(static_cast<unsigned char>(line[2]))) continue;
    std::size_t quote = line.find('"');
    if (quote == std::string_view::npos) continue;
    std::size_t close = quote + 1;
    bool escaped = false;
    for (; close < line.size() && line[close] != '"'; ++close) {
      if (line[close] == '\\' && close + 1 < line.size()) ++close, escaped = true;
    }
    std::string_view name = line.substr(quote + 1, close - quote - 1);
    if (escaped) {
      unescaped.clear();
      for (std::size_t i = 0; i < name.size(); ++i) {
        if (name[i] == '\\' && i + 1 < name.size()) ++i;
        unescaped += name[i];
      }
      name = unescaped;
    }
    if (name.empty() || name.front() == '<') continue;  // <built-in>, <command-line>
    if (name.ends_with("//")) continue;  // GCC's working-directory marker (-g: -fworking-directory)
    if (seen.find(name) != seen.end()) continue;
    seen.emplace(name);
    out.emplace_back(name);
  }
}

// A file name as make reads it: spaces escaped.
std::string make_escaped(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == ' ') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::vector<std::string> files_of_markers(const std::vector<std::string_view>& preprocessed) {
  std::vector<std::string> files;
  std::set<std::string, std::less<>> seen;
  for (std::string_view text : preprocessed) marked_files(text, files, seen);
  return files;
}

std::string dependency_file(std::string_view target, const std::vector<std::string>& files, bool phony) {
  std::string out = std::string(target) + " :";
  for (std::size_t i = 0; i < files.size(); ++i) {
    out += (i == 0 ? " " : " \\\n    ") + make_escaped(files[i]);
  }
  out += "\n";
  if (phony) {
    for (std::size_t i = 1; i < files.size(); ++i) out += "\n" + make_escaped(files[i]) + ":\n";
  }
  return out;
}

std::string fixed_temporary_names(std::string word) {
  constexpr std::string_view k_prefix = "tmpxft_";
  for (std::size_t at = word.find(k_prefix); at != std::string::npos; at = word.find(k_prefix, at + 1)) {
    std::size_t i = at + k_prefix.size();
    auto hex_run = [&](std::size_t from) {
      if (from + 8 > word.size()) return false;
      for (std::size_t k = from; k < from + 8; ++k) {
        if (!std::isxdigit(static_cast<unsigned char>(word[k]))) return false;
      }
      return true;
    };
    if (hex_run(i) && i + 8 < word.size() && word[i + 8] == '_' && hex_run(i + 9)) {
      word.replace(i, 17, "00000000_00000000");
    }
  }
  return word;
}

namespace {

std::string base_name(std::string_view path) {
  auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

bool runs_host_compiler(const PlanStep& step) {
  return step.kind == PlanStep::Kind::run && !step.argv.empty() && is_host_compiler(base_name(step.argv.front()));
}

std::vector<std::string> options_of(const std::vector<std::string>& argv) {
  return argv.empty() ? std::vector<std::string>{} : std::vector<std::string>(argv.begin() + 1, argv.end());
}

}  // namespace

bool is_preprocessor(const PlanStep& step) {
  return runs_host_compiler(step) && first_with(host_compiler_options(), options_of(step.argv), k_other_mode) == "-E";
}

bool is_host_compile(const std::vector<std::string>& argv, std::string_view work) {
  if (!first_with(host_compiler_options(), options_of(argv), k_compile_mode)) return false;
  return std::any_of(argv.begin(), argv.end(),
                     [&](const std::string& a) { return a.starts_with(work) && a.ends_with(".cudafe1.cpp"); });
}

std::optional<std::string> plan_refusal(const std::vector<PlanStep>& steps, std::string_view work) {
  static const std::vector<std::string_view> k_known = {"cicc", "ptxas", "cudafe++", "fatbinary", "nvlink"};
  int host_compiles = 0;
  for (const PlanStep& step : steps) {
    if (step.kind != PlanStep::Kind::run) continue;
    if (step.argv.empty()) return std::string("plan step without a program");
    std::string program = base_name(step.argv.front());
    bool known = std::find(k_known.begin(), k_known.end(), program) != k_known.end() || is_host_compiler(program);
    if (!known) return "plan step " + program;
    if (runs_host_compiler(step) && is_host_compile(step.argv, work)) ++host_compiles;
  }
  // One source, one host compile: a plan that compiles more runs unchanged rather than stage two
  // objects into one.
  if (host_compiles > 1) return std::string("several sources in nvcc's plan");
  return std::nullopt;
}

std::string whole_compile_target(const std::vector<PlanStep>& steps, std::string_view work) {
  std::string target;
  bool ran = false, preprocessed = false;
  int host_compiles = 0;
  for (const PlanStep& step : steps) {
    if (step.kind == PlanStep::Kind::assign && ran) return {};
    if (step.kind != PlanStep::Kind::assign) ran = true;
    if (step.kind != PlanStep::Kind::run) continue;
    preprocessed |= is_preprocessor(step);
    if (!runs_host_compiler(step) || !is_host_compile(step.argv, work)) continue;
    ++host_compiles;
    std::vector<std::string> options = options_of(step.argv);
    if (first_with(host_compiler_options(), options, k_debug_info)) return {};
    target = object_path(host_compiler_options(), options);
  }
  return preprocessed && host_compiles == 1 ? target : std::string();
}

std::string find_archive(const std::vector<std::string>& folders, std::string_view name,
                         const std::function<bool(const std::string&)>& exists) {
  for (const std::string& folder : folders) {
    std::string path = folder + "/lib" + std::string(name) + ".a";
    if (exists(path)) return path;
  }
  return {};
}

NvlinkStep plan_nvlink(const std::vector<std::string>& argv, std::string_view work,
                       const std::function<bool(const std::string&)>& exists) {
  NvlinkStep out;
  if (argv.empty()) return out.refusal = "no program", out;
  std::vector<std::string> folders;  // -L, in order
  for (std::size_t i = 1; i < argv.size(); ++i) {
    if (argv[i] == "-L" && i + 1 < argv.size()) folders.push_back(argv[++i]);
    else if (argv[i].starts_with("-L") && argv[i].size() > 2) folders.push_back(argv[i].substr(2));
  }
  out.argv.push_back(argv.front());
  for (std::size_t i = 1; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.starts_with("--register-link-binaries=")) {  // the option, then its file (nvlink reads both alike)
      out.argv.push_back("--register-link-binaries");
      out.argv.push_back(a.substr(std::string_view("--register-link-binaries=").size()));
      continue;
    }
    if (a == "-o" || a == "--output-file" || a == "--host-ccbin" || a == "--register-link-binaries" || a == "-L") {
      out.argv.push_back(a);
      if (i + 1 < argv.size()) out.argv.push_back(argv[++i]);
      continue;
    }
    if (a.starts_with("-l") && a.size() > 2) {
      // Libraries stay as the plan names them (nvlink writes its options into the cubin). Those
      // it finds hold device code only in libcudadevrt.a (in nvlink's identity); a library of
      // the toolkit's with no device code passes (libcudart_static.a, libculibos.a); any other
      // found is linked here.
      std::string name = a.substr(2), path = find_archive(folders, name, exists);
      if (name == "cudadevrt") {
        if (path.empty()) return out.refusal = "nvlink: no libcudadevrt.a in its -L folders", out;
        out.cudadevrt = path;
      } else if (!path.empty() && name != "cudart_static" && name != "culibos") {
        return out.refusal = "nvlink: a library of device code (" + name + ")", out;
      }
      out.argv.push_back(a);
      continue;
    }
    if (a.empty() || a.front() == '-' || a.starts_with(work)) {  // an option, or a file of the plan's own
      out.argv.push_back(a);
      continue;
    }
    std::string ext = std::filesystem::path(a).extension().string();
    if (ext != ".o" && ext != ".a" && ext != ".obj" && ext != ".lib") return out.refusal = "nvlink input " + ext, out;
    std::string name = std::string(work) + "dlink-input-" + std::to_string(out.inputs.size()) + ext;
    out.inputs.emplace_back(a, name);
    out.argv.push_back(name);
  }
  if (out.cudadevrt.empty()) return out.refusal = "nvlink: no -lcudadevrt", out;
  return out;
}

HostSplit split_host_compile(const std::vector<std::string>& argv, std::string_view work, const std::string& object,
                             const std::string& text) {
  HostSplit out;
  if (argv.empty()) return out;
  out.compile = {argv.front()};
  out.preprocess = {argv.front()};
  out.gcc = compiler_kind(argv.front()) == CompilerKind::gcc;
  const std::span<const std::string> words(argv.begin() + 1, argv.end());
  for (const Arg& a : read_args(host_compiler_options(), words)) {
    auto first = words.begin() + static_cast<std::ptrdiff_t>(a.index);
    std::vector<std::string> written(first, first + static_cast<std::ptrdiff_t>(a.count));
    if (a.affects(k_output)) {
      out.target = a.value;
      out.compile.insert(out.compile.end(), {"-o", object});
      out.preprocess.insert(out.preprocess.end(), {"-o", text});
      continue;
    }
    out.compile.insert(out.compile.end(), written.begin(), written.end());
    if (a.affects(k_compile_mode)) {
      out.preprocess.push_back("-E");
      if (out.gcc) out.preprocess.push_back("-fdirectives-only");
      continue;
    }
    out.preprocess.insert(out.preprocess.end(), written.begin(), written.end());
    out.debug |= a.affects(k_debug_info);
    if (a.affects(k_preprocessor)) continue;  // the text holds what it did
    if (a.is_input() && written.front().starts_with(work)) {
      out.input_name = base_name(written.front());  // the translation unit (the object's FILE symbol names it)
      continue;
    }
    out.key_args.insert(out.key_args.end(), written.begin(), written.end());
  }
  if (out.gcc) out.key_args.insert(out.key_args.end(), {"-fpreprocessed", "-fdirectives-only"});
  if (!is_step_file_name(out.input_name)) out.input_name = "host.ii";
  return out;
}

bool asks_line_info(const std::vector<std::string>& argv) {
  return std::any_of(argv.begin(), argv.end(),
                     [](const std::string& a) { return a == "-generate-line-info" || a == "--debug_mode"; });
}

namespace {

// Each line marker (# N "name" ..., or #line N "name") of `text`, its name's bytes [begin, end)
// as written (GCC's escapes included), given to `each`, which returns the replacement.
std::string map_marker_names(std::string_view text, const std::function<std::optional<std::string>(std::string_view)>& each) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    end = end == std::string_view::npos ? text.size() : end + 1;
    std::string_view line = text.substr(at, end - at);
    at = end;
    std::size_t digits = line.starts_with("# ") ? 2 : line.starts_with("#line ") ? 6 : std::string_view::npos;
    std::size_t open = digits == std::string_view::npos ? digits : line.find('"', digits);
    bool marker = open != std::string_view::npos && digits < line.size() && std::isdigit(static_cast<unsigned char>(line[digits]));
    std::size_t close = std::string_view::npos;
    if (marker) {
      for (std::size_t i = open + 1; i < line.size(); ++i) {
        if (line[i] == '\\') ++i;
        else if (line[i] == '"') {
          close = i;
          break;
        }
      }
    }
    std::optional<std::string> name;
    if (close != std::string_view::npos) name = each(line.substr(open + 1, close - open - 1));
    if (!name) {
      out += line;
      continue;
    }
    out += line.substr(0, open + 1);
    out += *name;
    out += line.substr(close);
  }
  return out;
}

// A file name as GCC writes it in a marker: backslashes and quotes escaped.
std::string marker_escaped(std::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::string absolute_line_markers(std::string_view text, const std::string& cwd, std::vector<std::string>& joined) {
  return map_marker_names(text, [&](std::string_view name) -> std::optional<std::string> {
    if (name.empty() || name.front() == '/' || name.front() == '<') return std::nullopt;
    if (std::find(joined.begin(), joined.end(), name) == joined.end()) joined.emplace_back(name);
    return marker_escaped(cwd) + "/" + std::string(name);
  });
}

std::string relative_line_markers(std::string_view text, const std::string& cwd, const std::vector<std::string>& joined) {
  const std::string prefix = marker_escaped(cwd) + "/";
  return map_marker_names(text, [&](std::string_view name) -> std::optional<std::string> {
    if (!name.starts_with(prefix)) return std::nullopt;
    std::string_view rest = name.substr(prefix.size());
    if (std::find(joined.begin(), joined.end(), rest) == joined.end()) return std::nullopt;
    return std::string(rest);
  });
}

std::string cicc_folder() {
  std::error_code ec;
  std::filesystem::path here = std::filesystem::current_path(ec);
  if (const char* pwd = std::getenv("PWD"); pwd != nullptr && pwd[0] == '/') {
    if (std::filesystem::equivalent(pwd, ".", ec)) return pwd;
  }
  return here.string();
}

std::string stamped_file_directives(std::string_view ptx, const std::function<std::optional<FileStamp>(const std::string&)>& stat) {
  std::string out;
  out.reserve(ptx.size() + 64);
  for (std::size_t at = 0; at < ptx.size();) {
    std::size_t end = ptx.find('\n', at);
    end = end == std::string_view::npos ? ptx.size() : end + 1;
    std::string_view line = ptx.substr(at, end - at);
    at = end;
    // \t.file\tN "name" (and nothing after the name's closing quote)
    std::size_t dot = line.find(".file");
    std::size_t open = line.find('"');
    std::size_t close = line.rfind('"');
    bool directive = dot != std::string_view::npos && line.substr(0, dot).find_first_not_of(" \t") == std::string_view::npos &&
                     open != std::string_view::npos && close > open;
    std::string_view after = directive ? line.substr(close + 1) : std::string_view();
    if (!directive || after.find_first_not_of(" \t\r\n") != std::string_view::npos) {
      out += line;
      continue;
    }
    std::string name(line.substr(open + 1, close - open - 1));
    std::optional<FileStamp> stamp = name.find('\\') == std::string::npos ? stat(name) : std::nullopt;
    if (!stamp) {
      out += line;
      continue;
    }
    out += line.substr(0, close + 1);
    out += ", " + std::to_string(stamp->mtime) + ", " + std::to_string(stamp->size);
    out += after;
  }
  return out;
}

std::optional<std::string> stable_module_id(std::string_view id, std::string_view unit) {
  auto is_hex8 = [](std::string_view s) {
    return s.size() == 8 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
  };
  auto is_number = [](std::string_view s) {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  };
  if (!id.starts_with('_')) return std::nullopt;
  std::size_t last = id.rfind('_');
  if (last == std::string_view::npos || last == 0) return std::nullopt;
  std::size_t before = id.rfind('_', last - 1);
  if (before == std::string_view::npos || before == 0) return std::nullopt;
  if (!is_number(id.substr(last + 1)) || !is_hex8(id.substr(before + 1, last - before - 1))) return std::nullopt;
  // Of the form's head, _<crc32 of the path>_<length>_<name>: at least three more fields.
  if (std::count(id.begin(), id.begin() + static_cast<std::ptrdiff_t>(before), '_') < 3) return std::nullopt;
  std::string hex = to_hex(sha256(std::string("kcache-module-id") + '\0' + std::string(unit)));
  unsigned long number = std::stoul(hex.substr(8, 6), nullptr, 16) % 10000000;  // as a pid's range
  return std::string(id.substr(0, before + 1)) + hex.substr(0, 8) + "_" + std::to_string(number);
}

}  // namespace kcache::launcher
