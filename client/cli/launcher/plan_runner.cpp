#include "launcher/plan_runner.hpp"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

namespace kcache::launcher {

bool run_plan(const std::vector<Task>& tasks, std::vector<Printed>& printed, std::size_t parallel) {
  std::size_t slots = tasks.size();
  for (const Task& t : tasks) slots = std::max(slots, t.slot.value_or(0) + 1);
  printed.resize(std::max(printed.size(), slots));
  // after[j]: the tasks j waits for. The tasks that name a file after its maker wait for that one
  // only, so two archs' cicc, which both read the module ID file cudafe++ wrote, run at once.
  std::map<std::string, std::size_t> maker;
  std::vector<std::vector<std::size_t>> after(tasks.size());
  for (std::size_t j = 0; j < tasks.size(); ++j) {
    for (const std::string& f : tasks[j].files) {
      auto [it, first] = maker.emplace(f, j);
      if (!first && it->second != j) after[j].push_back(it->second);
    }
    for (std::size_t i = 0; i < j; ++i) {
      if (tasks[i].barrier || tasks[j].barrier) after[j].push_back(i);
    }
  }
  enum class State { waiting, running, done };
  std::vector<State> state(tasks.size(), State::waiting);
  std::mutex mutex;  // guards state, failed, running and printed
  std::condition_variable changed;
  bool failed = false;
  std::size_t running = 0;
  parallel = std::max<std::size_t>(parallel, 1);
  std::vector<std::thread> threads;
  std::unique_lock lock(mutex);
  for (;;) {
    for (std::size_t j = 0; j < tasks.size() && !failed && running < parallel; ++j) {
      if (state[j] != State::waiting) continue;
      bool ready = std::all_of(after[j].begin(), after[j].end(), [&](std::size_t i) { return state[i] == State::done; });
      if (!ready) continue;
      state[j] = State::running;
      ++running;
      threads.emplace_back([&, j] {
        Printed own;  // the task's alone while it runs
        bool ok = tasks[j].run(own);
        std::lock_guard done(mutex);
        Printed& slot = printed[tasks[j].slot.value_or(j)];
        slot.add(own.out, own.err);
        state[j] = State::done;
        failed |= !ok;
        --running;
        changed.notify_all();
      });
    }
    bool all_done = std::all_of(state.begin(), state.end(), [](State s) { return s == State::done; });
    if (all_done || (failed && running == 0)) break;
    changed.wait(lock);
  }
  lock.unlock();
  for (std::thread& t : threads) t.join();
  return !failed;
}

std::vector<std::string> work_files(const std::vector<std::string>& argv, std::string_view work) {
  std::vector<std::string> out;
  if (work.empty()) return out;
  for (const std::string& a : argv) {
    for (std::size_t at = a.find(work); at != std::string::npos; at = a.find(work, at + 1)) {
      std::size_t end = a.find(',', at);
      out.push_back(a.substr(at, end == std::string::npos ? std::string::npos : end - at));
    }
  }
  return out;
}

}  // namespace kcache::launcher
