// This machine's own objects: the launcher's whole compiles and host objects that no daemon keeps
// for this client (a client without the publish role may not write what other machines link, and
// a daemon that is down keeps nothing), so that a warm rebuild here still takes them. Only this
// machine's builds write them; nothing here is ever sent to a daemon.
//
// One file per object under KCACHE_STATE_DIR/objects, named by its step key (the key the daemon
// would give it, kcache/step.hpp); written whole (a temporary file, renamed). Its format:
//   "kcache-local-object 1\n" <object size> " " <stdout size> " " <stderr size> "\n" and the bytes.
// At most KCACHE_LOCAL_OBJECTS_SIZE bytes (with K, M or G; default 1G): past it, the files read
// longest ago go first (a hit renews a file's time).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "kcache/key.hpp"

namespace kcache::launcher {

struct LocalObject {
  std::string object, stdout_text, stderr_text;
};

class LocalObjects {
 public:
  // The state folder's objects; an empty folder (none usable) makes every call a no-op.
  static LocalObjects open();
  LocalObjects(std::filesystem::path folder, std::uint64_t max_bytes) : m_folder(std::move(folder)), m_max(max_bytes) {}

  // By the key the daemon would give the object's request (object_key, launch.hpp).
  std::optional<LocalObject> get(const Key& key) const;
  void put(const Key& key, std::string_view object, std::string_view out, std::string_view err) const;

 private:
  void trim() const;  // down to 90% of m_max, oldest first, when past m_max

  std::filesystem::path m_folder;
  std::uint64_t m_max;
};

}  // namespace kcache::launcher
