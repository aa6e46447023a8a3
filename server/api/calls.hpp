// Calls in progress on every front end, so that shutdown can let them finish.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <utility>

#include "kcache/expected.hpp"

namespace kcache::server {

// Counts calls in progress so shutdown can let them finish; refuses new calls once draining.
class CallTracker {
 public:
  class Guard {
   public:
    explicit Guard(CallTracker* t) : m_tracker(t) {}
    Guard(Guard&& o) noexcept : m_tracker(std::exchange(o.m_tracker, nullptr)) {}
    Guard(const Guard&) = delete;
    ~Guard();

   private:
    CallTracker* m_tracker;
  };
  // A guard for a new call, or nullopt once draining.
  std::optional<Guard> enter();
  // Refuses new calls and waits until those in progress finish, or `deadline` passes.
  // Returns the number still running.
  int drain(std::chrono::steady_clock::time_point deadline);

 private:
  std::mutex m_mutex;  // guards m_active and m_draining
  std::condition_variable m_idle;
  int m_active = 0;
  bool m_draining = false;
};

// A guard for a new call, or UNAVAILABLE once shutting down (a message a client acts on).
Expected<CallTracker::Guard> enter_call(CallTracker& calls);

}  // namespace kcache::server
