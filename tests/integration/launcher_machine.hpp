// A build machine as the launcher's tests see it: commands run with its environment (the daemon
// it asks, KCACHE_SERVER; its state folder, KCACHE_STATE_DIR), and the launcher's counters there
// (launcher-stats) read as what changed since the last look. launcher_test.cpp and
// launcher_corpus_test.cpp share it.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/process.hpp"

extern char** environ;

namespace kcache::test {

// Runs argv in `cwd` (empty: this one) with this process's environment but for the machine's
// daemon and state folder.
inline ProcessResult run_on_machine(const std::vector<std::string>& argv, const std::filesystem::path& cwd,
                                    const std::string& server, const std::filesystem::path& state) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view v(*e);
    if (!v.starts_with("KCACHE_SERVER=") && !v.starts_with("KCACHE_STATE_DIR=")) env.emplace_back(v);
  }
  env.push_back("KCACHE_SERVER=" + server);
  env.push_back("KCACHE_STATE_DIR=" + state.string());
  ProcessOptions options;
  options.env = &env;
  options.cwd = cwd;
  options.output = ProcessOptions::Output::separate;
  auto ran = run_process(argv, options);
  EXPECT_TRUE(ran) << (ran ? "" : ran.error().message);
  return ran ? *ran : ProcessResult{};
}

// The launcher's counters in a state folder, each call giving what changed since the last.
class LauncherCounts {
 public:
  explicit LauncherCounts(std::filesystem::path state) : m_state(std::move(state)) {}
  std::map<std::string, long> delta() {
    std::map<std::string, long> now, changed;
    std::ifstream in(m_state / "launcher-stats");
    std::string name;
    long value = 0;
    while (in >> name >> value) now[name] = value;
    for (const auto& [n, v] : now) {
      if (v != m_seen[n]) changed[n] = v - m_seen[n];
    }
    m_seen = now;
    return changed;
  }

 private:
  std::filesystem::path m_state;
  std::map<std::string, long> m_seen;
};

}  // namespace kcache::test
