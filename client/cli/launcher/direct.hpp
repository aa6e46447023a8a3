// Direct-mode hits (in the spirit of ccache's direct mode): a compile seen before on this machine is
// answered without running the compiler's plan, any preprocessor or any step. Its manifest, kept in
// the state folder under a key of the command line and the tools, lists every file the
// preprocessors read (from the line markers of every pass, device and host) with its digest, the
// places where a new header would shadow a listed one, and the whole compile's look-up; a hit
// checks them (size and times first, the digest where those changed) and takes the object that
// look-up names.
//
// Toolkit-free: the manifest's format, its checks and the command line's view are unit-tested
// (tests/unit/launcher_plan_test.cpp); launch.cpp runs them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/sha256.hpp"
#include "launcher/options.hpp"

namespace kcache::launcher {

// What a command line contributes to the direct key: its words with the object's and the dependency
// file's paths left out (a second build folder with the same command has the same key), the include
// directories it names in search order (-iquote, -I, -isystem), and whether the compile depends
// on the folder it runs in (a relative source or include path, debug information). nullopt: no
// direct mode for this command line (a dependency file without -MF, which the launcher could not
// name without the plan; device line information, which holds the files' times).
struct DirectArgs {
  std::vector<std::string> words;
  std::vector<std::string> include_dirs;
  bool folder_matters = false;
  std::string dependency_target;  // the dependency file's rule target, where one is written
};
std::optional<DirectArgs> direct_args(const OptionTable& table, const std::vector<std::string>& args);

// One file a compile read: its path as the line markers name it, and what it was.
struct ManifestFile {
  std::string path;
  std::int64_t mtime_ns = 0, ctime_ns = 0;  // 0: changed too recently to trust (always hashed)
  std::uint64_t size = 0;
  Digest digest{};
};

// One compile's record: what it read, where nothing was, and what it made.
struct ManifestEntry {
  std::vector<ManifestFile> files;
  std::vector<std::string> absent;  // paths that did not exist: a header there would shadow a listed one
  std::string request;              // the whole compile's look-up (a serialized v1::StepRequest)
  std::string object;               // its key as this machine's objects name it (hex): read with no gRPC
  std::string driver;               // what the compiler's driver printed (nvcc warning : ...)
  std::string out, err;             // what the skipped preprocessors printed
  std::string dependencies;         // the dependency file, where one was written
};

// A manifest: its entries, newest first (at most k_manifest_entries: a header switched back and
// forth, as between two branches, keeps both).
inline constexpr std::size_t k_manifest_entries = 4;
std::string write_manifest(const std::vector<ManifestEntry>& entries);
std::optional<std::vector<ManifestEntry>> read_manifest(std::string_view text);

// How the checks see the file system (the launcher's: stat and sha256_file).
struct FileState {
  std::int64_t mtime_ns = 0, ctime_ns = 0;
  std::uint64_t size = 0;
};
struct FileSystem {
  std::function<std::optional<FileState>(const std::string&)> stat;  // nullopt: absent
  std::function<std::optional<Digest>(const std::string&)> digest;   // nullopt: unreadable
  std::function<std::vector<std::string>(const std::string&)> list;  // a folder's names; none when absent
};

// Whether every file of `entry` is as it was and nothing appeared where it was absent. Paths are
// taken relative to `folder` where they are relative. A file whose size differs misses at once;
// whose times differ (or were not trusted) is hashed. Absent paths many to a folder (a system
// header's names in a project's folder) are checked by one listing of it rather than a stat each.
inline constexpr std::size_t k_listed_probes = 16;
bool manifest_entry_holds(const ManifestEntry& entry, const std::filesystem::path& folder, const FileSystem& fs);

// The paths where a new file would shadow one of `files` (absolute, as read): for each header, its
// name as each earlier include directory would see it (under an -I directory: its path relative
// to it; else its last one to three path components), in the folders of the project's own files
// (quoted includes search there first) and in every include directory before the one it was
// found in. Each probe is the first missing component of such a path; paths that exist are left
// out (they did not shadow when the compile ran). `first` is the source, shadowed by nothing.
std::vector<std::string> shadow_probes(const std::vector<std::string>& files, const std::vector<std::string>& include_dirs,
                                       const std::vector<std::string>& system_roots,
                                       const std::function<bool(const std::string&)>& exists);

// Whether a file's bytes ask for the time of the compile (__DATE__, __TIME__, __TIMESTAMP__): a
// compile that reads one has no manifest.
bool reads_the_time(std::string_view bytes);

}  // namespace kcache::launcher
