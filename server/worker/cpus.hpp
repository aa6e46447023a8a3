// The CPUs this daemon may run on, lent to compile jobs: a job that starts while others' cores
// are free may spread its cubin assembly over them (ptxas's and nvJitLink's split compile), and
// two jobs are never pinned to one core. A job's worker pins itself to what it was lent, so the
// split takes only those cores; the split itself is always asked for the same way, so a cubin is
// the same bytes whatever it was lent (cubin.cpp).
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

namespace kcache::server {

class CpuSlots {
 public:
  // `cpus`: the CPUs to lend (empty: this process's affinity set).
  explicit CpuSlots(std::vector<unsigned> cpus = {});
  CpuSlots(const CpuSlots&) = delete;
  CpuSlots& operator=(const CpuSlots&) = delete;

  // CPUs lent to one job until it is destroyed.
  class Lease {
   public:
    Lease() = default;
    Lease(CpuSlots* slots, std::vector<unsigned> cpus) : m_slots(slots), m_cpus(std::move(cpus)) {}
    Lease(Lease&& other) noexcept;
    Lease& operator=(Lease&& other) noexcept;
    ~Lease();
    // Empty: none was free; the job runs where the system puts it, as when there are more
    // workers than CPUs.
    const std::vector<unsigned>& cpus() const { return m_cpus; }

   private:
    void release();
    CpuSlots* m_slots = nullptr;
    std::vector<unsigned> m_cpus;
  };

  // Up to `want` free CPUs (none: an empty lease).
  Lease take(std::size_t want);
  std::size_t free() const;
  std::size_t size() const { return m_size; }

  // This process's affinity set (sched_getaffinity).
  static std::vector<unsigned> allowed();
  // Pins the calling thread (and the threads and processes it starts later) to `cpus`; empty:
  // every CPU in `all`. False when the system refused.
  static bool pin(const std::vector<unsigned>& cpus, const std::vector<unsigned>& all);

 private:
  mutable std::mutex m_mutex;  // guards m_free
  std::vector<unsigned> m_free;
  std::size_t m_size = 0;
};

}  // namespace kcache::server
