// Access times and eviction: approximate LRU over whole entries.
//
// Reads note accesses in memory (note_access); the background thread writes them to `meta` in
// one batch per interval, as an access-time record per entry plus an index ordered by time
// (records.hpp). Eviction walks that index from the oldest end and removes entries whole. It is
// approximate in two ways: an access is ordered by the millisecond it was noted, and accesses not
// yet flushed are flushed before each eviction pass, not before each victim.
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include "store/records.hpp"
#include "store/store_impl.hpp"

namespace kcache::server {

using namespace records;

namespace {

// Above this many noted accesses the background thread is woken early, bounding the map.
constexpr std::size_t k_access_flush_threshold = 1 << 16;
// Victims per hold of the write lock, so compiles storing results interleave with eviction.
constexpr std::size_t k_victims_per_lock = 64;

std::string access_id(Side side, const Key& key) { return static_cast<char>(side) + std::string(key.bytes()); }

}  // namespace

void Store::Impl::note_access(Side side, const Key& key) {
  std::size_t noted;
  {
    std::lock_guard lock(m_access_mutex);
    m_accessed[access_id(side, key)] = unix_ms_now();
    noted = m_accessed.size();
  }
  if (noted == k_access_flush_threshold) wake_background();
}

void Store::Impl::wake_background() {
  {
    std::lock_guard lock(m_background_mutex);
    m_work_waiting = true;
  }
  m_background_wake.notify_one();
}

Expected<void> Store::Impl::flush_access_times() {
  std::lock_guard lock(m_write_mutex);
  return flush_access_times_locked();
}

Expected<void> Store::Impl::flush_access_times_locked() {
  std::unordered_map<std::string, std::uint64_t> accessed;
  {
    std::lock_guard lock(m_access_mutex);
    accessed.swap(m_accessed);
  }
  if (accessed.empty()) return {};
  rocksdb::WriteBatch batch;
  std::string value;
  for (const auto& [id, when] : accessed) {
    auto side = static_cast<Side>(id[0]);
    Key key = key_from_bytes(std::string_view(id).substr(1));
    // No access time: the entry was removed since (or is being written, which sets one).
    if (!m_db->Get(rocksdb::ReadOptions(), m_meta, atime_key(side, key), &value).ok()) continue;
    std::uint64_t before = decode_u64(value);
    if (before >= when) continue;  // a later write already moved it
    batch.Delete(m_meta, lru_key(before, side, key));
    batch.Put(m_meta, lru_key(when, side, key), "");
    batch.Put(m_meta, atime_key(side, key), encode_u64(when));
  }
  rocksdb::Status s = m_db->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) return storage_error("writing access times", s);
  return {};
}

Expected<void> Store::Impl::index_access_times() {
  std::string marker;
  if (m_db->Get(rocksdb::ReadOptions(), m_meta, k_lru_marker_key, &marker).ok()) return {};
  std::uint64_t indexed = 0;
  rocksdb::WriteBatch batch;
  rocksdb::ReadOptions ro;
  ro.total_order_seek = true;  // across keys: the families' prefix bloom filters hold within one key only
  for (Side side : {Side::device, Side::host}) {
    std::unique_ptr<rocksdb::Iterator> it(m_db->NewIterator(ro, family(side)));
    for (it->SeekToFirst(); it->Valid(); it->Next()) {
      std::string_view k = it->key().ToStringView();
      if (k.size() != k_key_size + 1 || k[k_key_size] != k_entry_tag) continue;
      auto entry = decode_entry(it->value().ToStringView());
      std::uint64_t when = entry ? entry->record.created_unix * 1000 : 0;  // undecodable: evicted first
      Key key = key_from_bytes(k);
      batch.Put(m_meta, atime_key(side, key), encode_u64(when));
      batch.Put(m_meta, lru_key(when, side, key), "");
      ++indexed;
    }
    if (!it->status().ok()) return storage_error("indexing access times", it->status());
  }
  batch.Put(m_meta, k_lru_marker_key, "1");
  rocksdb::Status s = m_db->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) return storage_error("writing access times", s);
  if (indexed > 0) spdlog::info("store: gave {} existing entries an access time (their creation time)", indexed);
  return {};
}

Expected<std::uint64_t> Store::Impl::evict_locked(std::uint64_t target, std::size_t max_victims,
                                            std::optional<std::pair<Side, Key>> keep) {
  std::string lower(1, k_lru_prefix), upper(1, static_cast<char>(k_lru_prefix + 1));
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(m_db->NewIterator(ro, m_meta));
  std::uint64_t victims = 0;
  for (it->Seek(lower); it->Valid() && m_bytes > target && victims < max_victims; it->Next()) {
    auto parsed = parse_lru_key(it->key().ToStringView());
    if (!parsed) continue;
    if (keep && *keep == *parsed) continue;
    auto freed = remove_entry_locked(parsed->first, parsed->second);
    if (!freed) return freed.error();
    ++victims;
    ++m_evictions;
    m_evicted_bytes += *freed;
  }
  if (!it->status().ok()) return storage_error("walking access times", it->status());
  return victims;
}

Expected<std::uint64_t> Store::Impl::evict(std::uint64_t target) {
  if (auto flushed = flush_access_times(); !flushed) return flushed.error();
  std::uint64_t total = 0;
  while (m_bytes > target) {
    std::lock_guard lock(m_write_mutex);
    auto victims = evict_locked(target, k_victims_per_lock);
    if (!victims) return victims.error();
    if (*victims == 0) break;  // nothing left to evict
    total += *victims;
  }
  return total;
}

void Store::Impl::background() {
  std::unique_lock lock(m_background_mutex);
  while (!m_stopping) {
    m_background_wake.wait_for(lock, m_access_flush_interval, [this] { return m_stopping || m_work_waiting; });
    if (m_stopping) break;
    m_work_waiting = false;
    lock.unlock();
    write_pending();
    if (auto flushed = flush_access_times(); !flushed) spdlog::error("{}", flushed.error().message);
    std::uint64_t high = m_max_bytes / 10 * 9, low = m_max_bytes / 10 * 8;
    if (m_max_bytes > 0 && m_bytes > high) {
      std::uint64_t before = m_bytes;
      auto evicted = evict(low);
      if (!evicted) {
        spdlog::error("store: eviction failed: {}", evicted.error().message);
      } else if (*evicted > 0) {
        spdlog::info("store: evicted {} least recently used entries ({} bytes) to stay under --max-size {}",
                     *evicted, before - std::min<std::uint64_t>(before, m_bytes.load()), m_max_bytes);
      }
    }
    lock.lock();
  }
  lock.unlock();
  write_pending();  // nothing accepted is lost at shutdown
}

}  // namespace kcache::server
