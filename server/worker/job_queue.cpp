#include "worker/job_queue.hpp"

#include <string>

namespace kcache::server {

JobQueue::JobQueue(std::size_t workers, std::size_t queue_capacity) : m_capacity(queue_capacity) {
  for (std::size_t i = 0; i < workers; ++i) m_threads.emplace_back([this] { run(); });
}

JobQueue::~JobQueue() { shutdown(); }

Expected<void> JobQueue::submit(std::function<void()> job) {
  {
    std::lock_guard lock(m_queue_mutex);
    if (m_stopping) return make_error(ErrorCode::k_unavailable, "kcached is shutting down; retry on another server");
    if (m_queue.size() >= m_capacity) {
      return make_error(ErrorCode::k_resource_exhausted,
                        "the compile queue is full (" + std::to_string(m_capacity) +
                            " jobs waiting); retry after a short backoff");
    }
    m_queue.push_back(std::move(job));
  }
  m_queue_changed.notify_one();
  return {};
}

void JobQueue::shutdown() {
  {
    std::lock_guard lock(m_queue_mutex);
    m_stopping = true;
  }
  m_queue_changed.notify_all();
  for (std::thread& t : m_threads) {
    if (t.joinable()) t.join();
  }
}

std::size_t JobQueue::queue_depth() const {
  std::lock_guard lock(m_queue_mutex);
  return m_queue.size();
}

std::size_t JobQueue::idle() const {
  std::lock_guard lock(m_queue_mutex);
  std::size_t busy = m_running;
  if (m_stopping || !m_queue.empty() || busy >= m_threads.size()) return 0;
  return m_threads.size() - busy;
}

void JobQueue::run() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(m_queue_mutex);
      m_queue_changed.wait(lock, [this] { return m_stopping || !m_queue.empty(); });
      if (m_queue.empty()) return;  // stopping and drained
      job = std::move(m_queue.front());
      m_queue.pop_front();
      ++m_running;
    }
    job();
    --m_running;
  }
}

}  // namespace kcache::server
