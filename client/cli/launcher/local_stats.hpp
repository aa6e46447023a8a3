// This machine's counters of the launcher: what it ran, hit, missed and ran unchanged.
#pragma once

#include <map>
#include <mutex>
#include <string>

namespace kcache::launcher {

// Counters of this machine's launches, kept in the client's state folder (`launcher-stats`):
// "name count" lines, updated under an flock. `kcache stats` prints them.
class LocalStats {
 public:
  void add(std::string name);  // from any thread
  ~LocalStats() { write(); }
  void write();  // adds this launch's counts to the file's

 private:
  std::mutex m_mutex;
  std::map<std::string, unsigned long long> m_counts;
};

}  // namespace kcache::launcher
