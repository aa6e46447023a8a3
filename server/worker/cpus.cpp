#include "worker/cpus.hpp"

#include <sched.h>

#include <algorithm>
#include <utility>

namespace kcache::server {

CpuSlots::CpuSlots(std::vector<unsigned> cpus) : m_free(cpus.empty() ? allowed() : std::move(cpus)) {
  std::sort(m_free.begin(), m_free.end());
  m_free.erase(std::unique(m_free.begin(), m_free.end()), m_free.end());
  m_size = m_free.size();
}

CpuSlots::Lease::Lease(Lease&& other) noexcept
    : m_slots(std::exchange(other.m_slots, nullptr)), m_cpus(std::move(other.m_cpus)) {}

CpuSlots::Lease& CpuSlots::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    m_slots = std::exchange(other.m_slots, nullptr);
    m_cpus = std::move(other.m_cpus);
  }
  return *this;
}

CpuSlots::Lease::~Lease() { release(); }

void CpuSlots::Lease::release() {
  if (m_slots == nullptr || m_cpus.empty()) return;
  std::lock_guard lock(m_slots->m_mutex);
  m_slots->m_free.insert(m_slots->m_free.end(), m_cpus.begin(), m_cpus.end());
  std::sort(m_slots->m_free.begin(), m_slots->m_free.end());
  m_slots = nullptr;
  m_cpus.clear();
}

CpuSlots::Lease CpuSlots::take(std::size_t want) {
  std::lock_guard lock(m_mutex);
  std::size_t n = std::min(want, m_free.size());
  std::vector<unsigned> lent(m_free.begin(), m_free.begin() + static_cast<std::ptrdiff_t>(n));
  m_free.erase(m_free.begin(), m_free.begin() + static_cast<std::ptrdiff_t>(n));
  return Lease(this, std::move(lent));
}

std::size_t CpuSlots::free() const {
  std::lock_guard lock(m_mutex);
  return m_free.size();
}

std::vector<unsigned> CpuSlots::allowed() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<unsigned> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (unsigned cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
  }
  return out;
}

bool CpuSlots::pin(const std::vector<unsigned>& cpus, const std::vector<unsigned>& all) {
  const std::vector<unsigned>& chosen = cpus.empty() ? all : cpus;
  if (chosen.empty()) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (unsigned cpu : chosen) {
    if (cpu < CPU_SETSIZE) CPU_SET(cpu, &set);
  }
  return sched_setaffinity(0, sizeof set, &set) == 0;
}

}  // namespace kcache::server
