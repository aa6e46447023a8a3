#include "store/hot_cache.hpp"

namespace kcache::server {

std::string HotCache::prefix(Side side, const Key& key) {
  return std::string(1, side == Side::host ? 'h' : 'd') + std::string(key.bytes());
}

std::shared_ptr<const Image> HotCache::find(Side side, const Key& key, const ImageRequest& which) {
  std::lock_guard lock(m_mutex);
  auto it = m_slots.find(prefix(side, key) + which.arch + '\0' + std::string(kind_name(which.kind)));
  if (it == m_slots.end()) return nullptr;
  m_lru.splice(m_lru.begin(), m_lru, it->second.lru);
  ++m_hits;
  return it->second.image;
}

std::uint64_t HotCache::generation() const {
  std::lock_guard lock(m_mutex);
  return m_generation;
}

void HotCache::insert(Side side, const Key& key, std::shared_ptr<const Image> image, std::uint64_t generation) {
  std::uint64_t size = image->data.size();
  if (size > m_max_bytes / 4) return;  // one image never takes most of the cache
  std::string id = prefix(side, key) + image->meta.arch + '\0' + std::string(kind_name(image->meta.kind));
  std::lock_guard lock(m_mutex);
  if (generation != m_generation || m_slots.contains(id)) return;
  insert_locked(std::move(id), Slot{std::move(image), nullptr, size, {}});
}

std::shared_ptr<const std::vector<ImageMeta>> HotCache::find_list(Side side, const Key& key) {
  std::lock_guard lock(m_mutex);
  auto it = m_slots.find(prefix(side, key));  // the prefix alone: no image's name is that short
  if (it == m_slots.end()) return nullptr;
  m_lru.splice(m_lru.begin(), m_lru, it->second.lru);
  return it->second.list;
}

void HotCache::insert_list(Side side, const Key& key, std::vector<ImageMeta> metas, std::uint64_t generation) {
  std::uint64_t size = sizeof(std::vector<ImageMeta>);
  for (const ImageMeta& m : metas) {
    size += sizeof(ImageMeta) + m.arch.size() + m.kernels.size() * sizeof(KernelInfo);
    for (const KernelInfo& k : m.kernels) size += k.name.size();
    for (const std::string& s : m.stubbed) size += sizeof(std::string) + s.size();
    for (const auto& [e, l] : m.lowered_names) size += 2 * sizeof(std::string) + e.size() + l.size();
  }
  if (size > m_max_bytes / 4) return;
  std::string id = prefix(side, key);
  std::lock_guard lock(m_mutex);
  if (generation != m_generation || m_slots.contains(id)) return;
  insert_locked(std::move(id), Slot{nullptr, std::make_shared<const std::vector<ImageMeta>>(std::move(metas)), size, {}});
}

void HotCache::insert_locked(std::string id, Slot slot) {
  while (m_bytes + slot.bytes > m_max_bytes && !m_lru.empty()) {
    auto victim = m_slots.find(m_lru.back());
    m_bytes -= victim->second.bytes;
    m_slots.erase(victim);
    m_lru.pop_back();
  }
  m_lru.push_front(id);
  m_bytes += slot.bytes;
  slot.lru = m_lru.begin();
  m_slots.emplace(std::move(id), std::move(slot));
}

void HotCache::drop(Side side, const Key& key) {
  std::string p = prefix(side, key);
  std::lock_guard lock(m_mutex);
  ++m_generation;
  for (auto it = m_slots.lower_bound(p); it != m_slots.end() && it->first.starts_with(p);) {
    m_bytes -= it->second.bytes;
    m_lru.erase(it->second.lru);
    it = m_slots.erase(it);
  }
}

std::uint64_t HotCache::bytes() const {
  std::lock_guard lock(m_mutex);
  return m_bytes;
}

std::uint64_t HotCache::hits() const {
  std::lock_guard lock(m_mutex);
  return m_hits;
}

}  // namespace kcache::server
