// remove_folders_of_dead_processes (common/src/process.cpp): what kcached's gRPC gate and the
// compiler launcher run to remove the private folders that their killed processes left in /tmp.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "kcache/process.hpp"
#include "test_support.hpp"

namespace kcache {
namespace {

namespace fs = std::filesystem;

// The pid of a process that has exited and been waited for.
pid_t a_dead_pid() {
  pid_t pid = fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

TEST(DeadProcessFolders, OnlyThisUsersFoldersOfGonePidsGoAndOnlyOnceOldEnough) {
  test::TempDir dir;
  const std::string dead = std::to_string(a_dead_pid()), live = std::to_string(::getpid());
  const fs::path gone = dir.path() / ("kcache-cc-" + dead + "-aaaaaa");
  const fs::path gone_old = dir.path() / ("kcache-cc-" + dead + "-bbbbbb");
  const fs::path running = dir.path() / ("kcache-cc-" + live + "-cccccc");
  const fs::path other_prefix = dir.path() / ("kcached-" + dead + "-dddddd");
  const fs::path no_pid = dir.path() / "kcache-cc-x1-eeeeee";
  const fs::path a_file = dir.path() / ("kcache-cc-" + dead + "-ffffff");
  const fs::path someone_elses = dir.path() / ("kcache-cc-" + dead + "-gggggg");
  for (const fs::path& p : {gone, gone_old, running, other_prefix, no_pid, someone_elses}) {
    fs::create_directories(p / "inside");
  }
  // Another user's (only root may give a folder away: elsewhere this part checks nothing).
  const bool given_away = ::chown(someone_elses.c_str(), 65534, 65534) == 0;
  test::write_file(gone / "inside" / "x.ii", "preprocessed");
  test::write_file(a_file, "not a folder");
  const auto two_hours_ago = fs::file_time_type::clock::now() - std::chrono::hours(2);
  for (const fs::path& p : {gone_old, running}) fs::last_write_time(p, two_hours_ago);

  // Folders must be an hour old: only the aged one of a gone pid goes.
  remove_folders_of_dead_processes(dir.path(), "kcache-cc-", std::chrono::hours(1));
  EXPECT_FALSE(fs::exists(gone_old));
  EXPECT_TRUE(fs::exists(gone)) << "touched within the hour";
  EXPECT_TRUE(fs::exists(running)) << "its pid runs";

  // No age asked for: every folder of a gone pid under the prefix goes, with what is in it.
  remove_folders_of_dead_processes(dir.path(), "kcache-cc-");
  EXPECT_FALSE(fs::exists(gone));
  EXPECT_TRUE(fs::exists(running));
  EXPECT_TRUE(fs::exists(other_prefix)) << "another prefix";
  EXPECT_TRUE(fs::exists(no_pid)) << "no pid in its name";
  EXPECT_TRUE(fs::exists(a_file)) << "not a folder";
  if (given_away) {
    EXPECT_TRUE(fs::exists(someone_elses)) << "another user's";
  }

  // A folder that does not exist, or is not readable as one, is no error.
  remove_folders_of_dead_processes(dir.path() / "absent", "kcache-cc-");
}

}  // namespace
}  // namespace kcache
