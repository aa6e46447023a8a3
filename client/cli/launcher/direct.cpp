#include "launcher/direct.hpp"

#include <algorithm>
#include <charconv>
#include <map>
#include <set>

namespace kcache::launcher {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view k_magic = "kcache-manifest 1";

bool is_one_of(std::string_view word, std::initializer_list<std::string_view> list) {
  return std::find(list.begin(), list.end(), word) != list.end();
}

std::string hex_of(std::string_view bytes) {
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += k_digits[c >> 4];
    out += k_digits[c & 15];
  }
  return out;
}

std::optional<std::string> bytes_of(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  out.reserve(hex.size() / 2);
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < hex.size(); i += 2) {
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi * 16 + lo);
  }
  return out;
}

template <typename T>
bool number_of(std::string_view text, T& out) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

// The words of one manifest line.
std::vector<std::string_view> fields(std::string_view line) {
  std::vector<std::string_view> out;
  for (std::size_t at = 0; at <= line.size();) {
    std::size_t end = std::min(line.find(' ', at), line.size());
    out.push_back(line.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

}  // namespace

std::optional<DirectArgs> direct_args(const OptionTable& table, const std::vector<std::string>& args) {
  DirectArgs out;
  bool dependency_file = false, dependency_named = false;
  for (const Arg& a : read_args(table, args)) {
    auto first = args.begin() + static_cast<std::ptrdiff_t>(a.index);
    std::vector<std::string> written(first, first + static_cast<std::ptrdiff_t>(a.count));
    const bool relative = !a.value.empty() && a.value.front() != '/';
    if (a.affects(k_output)) continue;  // the object's place: the same command elsewhere has the same key
    if (a.affects(k_dependency)) {
      if (is_one_of(a.spelling, {"-MF", "--dependency-output"})) {
        dependency_named = true;
        continue;  // the dependency file's place, likewise
      }
      dependency_file |= !is_one_of(a.spelling, {"-MT", "--dependency-target-name", "-MQ", "-MP",
                                                 "--generate-dependency-targets", "-ddp", "--dependency-drive-prefix"});
    }
    if (a.is_input()) out.folder_matters |= written.front().empty() || written.front().front() != '/';
    if (a.affects(k_debug_info)) {
      // Line tables of device code carry each file's time and size (ptxas), which a digest does
      // not see: no manifest. Other debug information names the folder.
      if (is_one_of(a.spelling, {"-lineinfo", "--generate-line-info", "-src-in-ptx", "--source-in-ptx", "-G",
                                 "--device-debug"})) {
        return std::nullopt;
      }
      out.folder_matters = true;
    }
    if (a.affects(k_preprocessor)) {
      if (is_one_of(a.spelling, {"-I", "--include-path", "-isystem", "--system-include", "-iquote", "-idirafter"})) {
        out.include_dirs.push_back(a.value);
      }
      out.folder_matters |= relative && !is_one_of(a.spelling, {"-D", "--define-macro", "-U", "--undefine-macro"});
    }
    if (a.affects(k_host_compiler)) {
      // Options passed on to the host compiler (-Xcompiler=-fPIC,-O2) may name folders (a
      // relative -I, -include), ask for debug information or name paths in what they write.
      for (std::size_t at = 0; at <= a.value.size();) {
        std::size_t end = std::min(a.value.find(',', at), a.value.size());
        std::string_view word = std::string_view(a.value).substr(at, end - at);
        at = end + 1;
        if (word.starts_with("-g") || word.starts_with("-M")) out.folder_matters = true;
        if (word.starts_with("-I") || word.starts_with("-i")) {
          // A path joined to its option matters where it is relative; one in the next word, always.
          bool relative = true;
          for (std::string_view option : {"-isystem", "-iquote", "-idirafter", "-include", "-imacros", "-I"}) {
            if (!word.starts_with(option)) continue;
            std::string_view path = word.substr(option.size());
            relative = path.empty() || path.front() != '/' || path.find("/.") != std::string_view::npos;
            break;
          }
          out.folder_matters |= relative;
        }
        for (std::string_view named : {"prefix-map", "profile", "debug", "coverage", "dump"}) {
          out.folder_matters |= word.starts_with("-f") && word.find(named) != std::string_view::npos;
        }
      }
    }
    out.words.insert(out.words.end(), written.begin(), written.end());
  }
  if (dependency_file) {
    if (!dependency_named) return std::nullopt;
    DependencyOptions deps = dependency_options(table, args);
    out.dependency_target = deps.target.empty() ? object_path(table, args) : deps.target;
  }
  return out;
}

std::string write_manifest(const std::vector<ManifestEntry>& entries) {
  std::string out = std::string(k_magic) + "\n";
  for (std::size_t i = 0; i < entries.size() && i < k_manifest_entries; ++i) {
    const ManifestEntry& e = entries[i];
    out += "entry\nrequest " + hex_of(e.request) + "\nobject " + hex_of(e.object) + "\ndriver " + hex_of(e.driver) + "\nout " + hex_of(e.out) + "\nerr " + hex_of(e.err) + "\ndeps " +
           hex_of(e.dependencies) + "\n";
    for (const ManifestFile& f : e.files) {
      out += "file " + std::to_string(f.mtime_ns) + " " + std::to_string(f.ctime_ns) + " " + std::to_string(f.size) +
             " " + to_hex(f.digest) + " " + hex_of(f.path) + "\n";
    }
    for (const std::string& path : e.absent) out += "absent " + hex_of(path) + "\n";
    out += "end\n";
  }
  return out;
}

std::optional<std::vector<ManifestEntry>> read_manifest(std::string_view text) {
  std::vector<ManifestEntry> out;
  std::optional<ManifestEntry> entry;
  bool header = false;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    if (end == std::string_view::npos) return std::nullopt;  // cut short
    std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (!header) {
      if (line != k_magic) return std::nullopt;
      header = true;
      continue;
    }
    std::vector<std::string_view> f = fields(line);
    if (f[0] == "entry" && f.size() == 1 && !entry) {
      entry.emplace();
    } else if (f[0] == "end" && f.size() == 1 && entry) {
      out.push_back(std::move(*entry));
      entry.reset();
      if (out.size() > k_manifest_entries) return std::nullopt;
    } else if (entry && f.size() == 2 && is_one_of(f[0], {"request", "object", "driver", "out", "err", "deps", "absent"})) {
      auto bytes = bytes_of(f[1]);
      if (!bytes) return std::nullopt;
      if (f[0] == "request") entry->request = std::move(*bytes);
      if (f[0] == "object") entry->object = std::move(*bytes);
      if (f[0] == "driver") entry->driver = std::move(*bytes);
      if (f[0] == "out") entry->out = std::move(*bytes);
      if (f[0] == "err") entry->err = std::move(*bytes);
      if (f[0] == "deps") entry->dependencies = std::move(*bytes);
      if (f[0] == "absent") entry->absent.push_back(std::move(*bytes));
    } else if (entry && f[0] == "file" && f.size() == 6) {
      ManifestFile file;
      auto digest = digest_from_hex(f[4]);
      auto path = bytes_of(f[5]);
      if (!number_of(f[1], file.mtime_ns) || !number_of(f[2], file.ctime_ns) || !number_of(f[3], file.size) || !digest ||
          !path || path->empty()) {
        return std::nullopt;
      }
      file.digest = *digest;
      file.path = std::move(*path);
      entry->files.push_back(std::move(file));
    } else {
      return std::nullopt;
    }
  }
  if (!header || entry) return std::nullopt;
  return out;
}

bool manifest_entry_holds(const ManifestEntry& entry, const fs::path& folder, const FileSystem& files) {
  auto where = [&](const std::string& path) { return path.front() == '/' ? path : (folder / path).string(); };
  std::map<std::string, std::set<std::string>> by_folder;
  for (const std::string& path : entry.absent) {
    std::string full = where(path);
    std::size_t slash = full.rfind('/');
    by_folder[full.substr(0, slash)].insert(full.substr(slash + 1));
  }
  for (const auto& [dir, names] : by_folder) {
    if (names.size() < k_listed_probes || !files.list) {
      for (const std::string& name : names) {
        if (files.stat(dir + "/" + name)) return false;
      }
      continue;
    }
    for (const std::string& present : files.list(dir)) {
      if (names.contains(present)) return false;
    }
  }
  // Sizes and times first, all of them, so a changed file misses before anything is hashed.
  std::vector<const ManifestFile*> to_hash;
  for (const ManifestFile& f : entry.files) {
    auto now = files.stat(where(f.path));
    if (!now || now->size != f.size) return false;
    if (f.mtime_ns == 0 || now->mtime_ns != f.mtime_ns || now->ctime_ns != f.ctime_ns) to_hash.push_back(&f);
  }
  for (const ManifestFile* f : to_hash) {
    auto digest = files.digest(where(f->path));
    if (!digest || *digest != f->digest) return false;
  }
  return !entry.files.empty();
}

std::vector<std::string> shadow_probes(const std::vector<std::string>& files, const std::vector<std::string>& include_dirs,
                                       const std::vector<std::string>& system_roots,
                                       const std::function<bool(const std::string&)>& exists) {
  auto under = [](const std::string& path, const std::string& dir) {
    std::string d = dir.ends_with('/') ? dir : dir + "/";
    return path.size() > d.size() && path.starts_with(d);
  };
  auto relative_to = [](const std::string& path, const std::string& dir) {
    return path.substr(dir.size() + (dir.ends_with('/') ? 0 : 1));
  };
  // The folders of the project's own files: quoted includes look there before anywhere else.
  std::vector<std::string> quote_dirs;
  for (const std::string& f : files) {
    if (f.empty() || f.front() != '/') continue;
    bool system = std::any_of(system_roots.begin(), system_roots.end(), [&](const std::string& r) { return under(f, r); });
    std::string dir = fs::path(f).parent_path().string();
    if (!system && std::find(quote_dirs.begin(), quote_dirs.end(), dir) == quote_dirs.end()) quote_dirs.push_back(dir);
  }
  std::set<std::string> probes;
  for (std::size_t i = 1; i < files.size(); ++i) {
    const std::string& path = files[i];
    if (path.empty() || path.front() != '/') continue;
    std::vector<std::string> names, earlier = quote_dirs;
    auto found_in = std::find_if(include_dirs.begin(), include_dirs.end(), [&](const std::string& d) { return under(path, d); });
    if (found_in != include_dirs.end()) {
      names.push_back(relative_to(path, *found_in));
      earlier.insert(earlier.end(), include_dirs.begin(), found_in);
    } else {
      // A system header: its name is its last one to three components.
      fs::path p(path);
      std::vector<std::string> parts(p.begin(), p.end());
      std::string name;
      for (std::size_t k = 0; k < 3 && k + 2 < parts.size(); ++k) {
        name = parts[parts.size() - 1 - k] + (name.empty() ? "" : "/" + name);
        names.push_back(name);
      }
      earlier.insert(earlier.end(), include_dirs.begin(), include_dirs.end());
    }
    for (const std::string& dir : earlier) {
      for (const std::string& name : names) {
        // The first missing component of dir/name; nothing when it all exists (it did not shadow).
        std::string at = dir;
        for (const auto& part : fs::path(name)) {
          at += "/" + part.string();
          if (!exists(at)) {
            probes.insert(at);
            break;
          }
        }
      }
    }
  }
  return {probes.begin(), probes.end()};
}

bool reads_the_time(std::string_view bytes) {
  for (std::string_view word : {"__DATE__", "__TIME__", "__TIMESTAMP__"}) {
    if (bytes.find(word) != std::string_view::npos) return true;
  }
  return false;
}

}  // namespace kcache::launcher
