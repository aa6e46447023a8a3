// Store's private half (the Impl behind store.hpp): RocksDB's handles, the hot cache, put_soon's
// queue, the reads in flight, the access times noted in memory and the background thread. Only the
// store's own sources include it (store.cpp, lru.cpp, verify.cpp), so RocksDB stays in this folder.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "store/hot_cache.hpp"
#include "store/store.hpp"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
}  // namespace rocksdb

namespace kcache::server {

class Store::Impl {
 public:
  static Expected<std::unique_ptr<Impl>> open(const StoreOptions& options);
  ~Impl();
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  // Store's operations, as store.hpp describes them.
  Expected<void> put(Side side, const Key& key, const EntryRecord& record, std::span<const Image> images, Put how);
  void put_soon(Side side, const Key& key, const EntryRecord& record, std::vector<Image> images);
  Expected<std::vector<ImageMeta>> list(Side side, const Key& key, Reach reach);
  Expected<std::shared_ptr<const Image>> get(Side side, const Key& key, const ImageRequest& which, bool* from_memory,
                                             Reach reach);
  StoreStats stats() const;
  std::uint64_t max_bytes() const { return m_max_bytes; }
  Expected<std::uint64_t> evict(std::uint64_t target);
  Expected<bool> remove(Side side, const Key& key);
  Expected<void> flush_access_times();
  Expected<VerifyReport> verify(bool repair);
  Expected<void> flush();

 private:
  Impl() = default;
  rocksdb::ColumnFamilyHandle* family(Side side) const;
  void drop_corrupt_entry(Side side, const Key& key, const std::string& why);
  // Removes every record of the entry and its access time; returns the payload bytes freed.
  Expected<std::uint64_t> remove_entry_locked(Side side, const Key& key);
  // Gives every entry an access time (its creation time) unless the marker says they have one.
  Expected<void> index_access_times();
  // Evicts oldest first until usage <= target, at most `max_victims` entries, never
  // (side, keep). Needs m_write_mutex.
  Expected<std::uint64_t> evict_locked(std::uint64_t target, std::size_t max_victims,
                                       std::optional<std::pair<Side, Key>> keep = std::nullopt);
  void note_access(Side side, const Key& key);
  Expected<void> flush_access_times_locked();  // needs m_write_mutex
  // put's work, on images already shared: the hot cache keeps these very images (no copy).
  Expected<void> put_shared(Side side, const Key& key, const EntryRecord& record,
                            std::span<const std::shared_ptr<const Image>> images, Put how);
  void background();  // writes put_soon's entries; flushes access times; evicts above the high-water mark
  void write_pending();  // put_soon's entries, in order
  void wake_background();  // runs the background thread now
  // put_soon's entry of (side, key) not yet written, or null; needs m_pending_mutex.
  struct Pending {
    EntryRecord record;
    std::vector<std::shared_ptr<const Image>> images;
  };
  const Pending* pending_locked(Side side, const Key& key) const;
  // get()'s read from RocksDB, and the reads in progress that later gets of the same image join.
  Expected<std::shared_ptr<const Image>> read_image(Side side, const Key& key, const ImageRequest& which);
  struct Read {
    std::uint64_t changes = 0;  // m_changes when it began: only gets that begin before a later write join it
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    Expected<std::shared_ptr<const Image>> result = std::shared_ptr<const Image>();
  };

  std::unique_ptr<rocksdb::DB> m_db;
  std::vector<rocksdb::ColumnFamilyHandle*> m_handles;  // default, host, device, meta
  rocksdb::ColumnFamilyHandle* m_host = nullptr;
  rocksdb::ColumnFamilyHandle* m_device = nullptr;
  rocksdb::ColumnFamilyHandle* m_meta = nullptr;

  HostImageCheck m_host_image_check;
  std::unique_ptr<HotCache> m_hot;  // null without one
  std::uint64_t m_max_bytes = 0;
  std::chrono::milliseconds m_access_flush_interval{1000};
  // Serialises writers so the usage counters in `meta` change in the same batch as the data.
  std::mutex m_write_mutex;
  std::atomic<std::uint64_t> m_entries{0}, m_images{0}, m_bytes{0}, m_corrupt{0};  // lock-free reads
  std::atomic<std::uint64_t> m_evictions{0}, m_evicted_bytes{0};
  std::atomic<std::uint64_t> m_disk_reads{0}, m_shared_reads{0};
  // Writes and removals so far, each counted once it is in RocksDB: a get() that began after one
  // never joins a read that began before it (which may return the bytes it replaced).
  std::atomic<std::uint64_t> m_changes{0};
  std::mutex m_reads_mutex;  // guards m_reads
  std::map<std::string, std::shared_ptr<Read>> m_reads;  // by side, key, kind and arch

  // Accesses noted by reads (side byte + key bytes -> ms), written to `meta` by the background
  // thread: a hit costs a map insert, not a write.
  std::mutex m_access_mutex;
  std::unordered_map<std::string, std::uint64_t> m_accessed;

  std::mutex m_pending_mutex;  // guards m_pending and m_pending_order
  std::map<std::string, Pending> m_pending;  // by side byte + key bytes
  std::deque<std::string> m_pending_order;

  std::mutex m_background_mutex;  // guards m_stopping and m_work_waiting
  bool m_work_waiting = false;    // something asked the background thread to run now
  std::condition_variable m_background_wake;
  bool m_stopping = false;
  std::thread m_background;
};

}  // namespace kcache::server
