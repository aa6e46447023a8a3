#include "api/calls.hpp"

namespace kcache::server {

CallTracker::Guard::~Guard() {
  if (m_tracker == nullptr) return;
  std::lock_guard lock(m_tracker->m_mutex);
  if (--m_tracker->m_active == 0) m_tracker->m_idle.notify_all();
}

std::optional<CallTracker::Guard> CallTracker::enter() {
  std::lock_guard lock(m_mutex);
  if (m_draining) return std::nullopt;
  ++m_active;
  return Guard(this);
}

int CallTracker::drain(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(m_mutex);
  m_draining = true;
  m_idle.wait_until(lock, deadline, [this] { return m_active == 0; });
  return m_active;
}

Expected<CallTracker::Guard> enter_call(CallTracker& calls) {
  auto call = calls.enter();
  if (!call) return make_error(ErrorCode::k_unavailable, "kcached is shutting down; retry shortly");
  return std::move(*call);
}

}  // namespace kcache::server
