// The compile jobs' queue: a fixed set of threads behind a bounded queue, each running one job at
// a time on a worker process (worker.hpp). Front-end threads never compile: the cache queues a
// job here and waits for it. A full queue is refused at once (RESOURCE_EXHAUSTED upstream),
// never piled up.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kcache/expected.hpp"
#include "worker/cpus.hpp"

namespace kcache::server {

class JobQueue {
 public:
  JobQueue(std::size_t workers, std::size_t queue_capacity);
  ~JobQueue();  // finishes queued jobs, then joins
  JobQueue(const JobQueue&) = delete;
  JobQueue& operator=(const JobQueue&) = delete;

  // Queues `job`; RESOURCE_EXHAUSTED when the queue is full, UNAVAILABLE after shutdown().
  Expected<void> submit(std::function<void()> job);

  // Stops taking jobs, runs what is queued, joins the threads. Idempotent.
  void shutdown();

  std::size_t queue_depth() const;
  std::size_t running() const { return m_running; }
  // Threads free to start a job now: none while jobs wait in the queue, or after shutdown().
  std::size_t idle() const;
  std::size_t workers() const { return m_threads.size(); }
  std::size_t capacity() const { return m_capacity; }  // jobs that may wait
  // The CPUs jobs are lent (cpus.hpp).
  CpuSlots& cpus() { return m_cpus; }

 private:
  void run();

  const std::size_t m_capacity;
  mutable std::mutex m_queue_mutex;  // guards m_queue and m_stopping
  std::condition_variable m_queue_changed;
  std::deque<std::function<void()>> m_queue;
  bool m_stopping = false;
  std::atomic<std::size_t> m_running{0};
  std::vector<std::thread> m_threads;
  CpuSlots m_cpus;
};

}  // namespace kcache::server
