#include "kcache/source_headers.hpp"

#include <map>

#include "kcache/includes.hpp"
#include "input_file.hpp"
#include "kcache/job.hpp"

namespace kcache {
namespace {

struct Pending {
  std::string text;
  std::filesystem::path dir;  // where the file was found: its "quoted" includes are looked for here first
  std::string label;          // for messages
};

}  // namespace

Expected<std::vector<CollectedHeader>> collect_headers(std::string_view source, const std::filesystem::path& source_dir,
                                                       const std::vector<std::filesystem::path>& include_dirs,
                                                       std::uint64_t max_bytes) {
  std::vector<CollectedHeader> out;
  std::map<std::string, std::size_t> by_name;  // index in out
  std::uint64_t bytes = 0;
  std::vector<Pending> queue = {{std::string(source), source_dir, "the source"}};
  while (!queue.empty()) {
    Pending file = std::move(queue.back());
    queue.pop_back();
    for (const IncludeDirective& d : include_directives(file.text)) {
      if (d.has_include) continue;  // asks whether a header exists; sends nothing
      auto refuse = [&](const std::string& why) {
        return make_error(ErrorCode::k_invalid_argument,
                          file.label + ", line " + std::to_string(d.line) + ": '" + d.text + "' " + why);
      };
      if (d.computed) {
        return refuse("is a computed include (a macro): kcached takes includes that spell their header, \"name\" "
                      "or <name>");
      }
      if (include_reaches_out(d.name)) {
        return refuse("names its header by an absolute path or through '..', which kcached refuses: name it "
                      "relative to an -I folder");
      }
      std::vector<std::filesystem::path> dirs;
      if (!d.angled && !file.dir.empty()) dirs.push_back(file.dir);  // an in-memory source has no folder
      dirs.insert(dirs.end(), include_dirs.begin(), include_dirs.end());
      std::filesystem::path found;
      for (const std::filesystem::path& dir : dirs) {
        std::error_code ec;
        std::filesystem::path candidate = dir / d.name;
        if (std::filesystem::is_regular_file(candidate, ec)) {
          found = candidate;
          break;
        }
      }
      if (found.empty()) continue;  // a toolkit header, or one the daemon will report missing
      // A header that is a FIFO or a device, or larger than all the job may hold, is refused
      // before it is read; the total is checked below.
      auto text = read_input_file(found, {max_bytes, "the limit on a job's headers"});
      if (!text) return refuse("found a header that cannot be used: " + text.error().message);
      if (auto seen = by_name.find(d.name); seen != by_name.end()) {
        if (out[seen->second].bytes != *text) {
          return refuse("finds " + found.string() + ", but '" + d.name + "' already named " +
                        out[seen->second].found_at.string() +
                        ", a different file: NVRTC knows a header by the name its #include spells, so one name "
                        "can stand for one file only");
        }
        continue;
      }
      bytes += d.name.size() + text->size();
      if (out.size() + 1 > k_max_source_headers || bytes > max_bytes) {
        return refuse("takes the job past " + std::to_string(k_max_source_headers) + " headers or " +
                      std::to_string(max_bytes) + " bytes");
      }
      by_name[d.name] = out.size();
      out.push_back({d.name, *text, found});
      queue.push_back({*text, found.parent_path(), found.string()});
    }
  }
  return out;
}

}  // namespace kcache
