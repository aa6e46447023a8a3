#include "cache/activity.hpp"

#include <algorithm>
#include <map>

namespace kcache::server {
namespace {

std::string cut(std::string_view text, std::size_t bound) { return std::string(text.substr(0, bound)); }

std::vector<std::string> cut_archs(const std::vector<std::string>& archs) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < archs.size() && i < Activity::k_max_archs; ++i) {
    out.push_back(cut(archs[i], Activity::k_max_name_bytes));
  }
  return out;
}

}  // namespace

void Activity::compiled(Side side, std::string_view key, const std::vector<Image>& images, double seconds,
                        std::string_view tool) {
  Compile c;
  c.when = std::chrono::system_clock::now();
  c.key = cut(key, k_max_name_bytes);
  c.side = side;
  c.seconds = seconds;
  c.tool = cut(tool, k_max_name_bytes);
  std::vector<std::string> archs;
  std::map<std::string, Kernel, std::less<>> kernels;  // by name
  for (const Image& image : images) {
    if (!c.tool.empty()) break;  // a step's images are its files, not archs
    if (std::find(archs.begin(), archs.end(), image.meta.arch) == archs.end()) archs.push_back(image.meta.arch);
    for (const KernelInfo& k : image.meta.kernels) {
      Kernel& into = kernels[k.name];
      into.registers = std::max(into.registers, k.registers);
      into.spills = std::max(into.spills, k.spill_stores + k.spill_loads);
    }
  }
  c.archs = cut_archs(archs);
  c.kernel_count = kernels.size();
  for (auto& [name, k] : kernels) {
    if (c.kernels.size() == k_max_kernels) break;
    k.name = cut(name, k_max_name_bytes);
    c.kernels.push_back(std::move(k));
  }
  std::lock_guard lock(m_mutex);
  m_compiles.push_front(std::move(c));
  if (m_compiles.size() > k_max_compiles) m_compiles.pop_back();
  // Reservoir sampling: each time seen so far has the same chance to be in the sample.
  ++m_durations_seen;
  if (m_durations.size() < k_max_durations) {
    m_durations.push_back(seconds);
  } else if (auto slot = std::uniform_int_distribution<std::uint64_t>(0, m_durations_seen - 1)(m_random);
             slot < k_max_durations) {
    m_durations[slot] = seconds;
  }
}

void Activity::failed(std::string_view what, std::string_view key, std::string_view side,
                      const std::vector<std::string>& archs, const Error& error) {
  Failure f;
  f.when = std::chrono::system_clock::now();
  f.what = cut(what, k_max_name_bytes);
  f.key = cut(key, k_max_name_bytes);
  f.side = cut(side, k_max_name_bytes);
  f.archs = cut_archs(archs);
  f.code = error_code_name(error.code);
  f.message = cut(error.message, k_max_message_bytes);
  std::lock_guard lock(m_mutex);
  m_failures.push_front(std::move(f));
  if (m_failures.size() > k_max_errors) m_failures.pop_back();
}

std::vector<Activity::Compile> Activity::compiles() const {
  std::lock_guard lock(m_mutex);
  return {m_compiles.begin(), m_compiles.end()};
}

std::vector<Activity::Failure> Activity::failures() const {
  std::lock_guard lock(m_mutex);
  return {m_failures.begin(), m_failures.end()};
}

std::vector<double> Activity::durations() const {
  std::lock_guard lock(m_mutex);
  return m_durations;
}

std::vector<double> Activity::take_durations() {
  std::lock_guard lock(m_mutex);
  std::vector<double> out;
  out.swap(m_durations);
  m_durations_seen = 0;
  return out;
}

}  // namespace kcache::server
