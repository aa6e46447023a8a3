#include "store/store.hpp"

#include "store/records.hpp"
#include "store/store_impl.hpp"
#include "kcache/step.hpp"

#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/snapshot.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>

namespace kcache::server {
namespace {

using namespace records;

rocksdb::ColumnFamilyOptions side_family_options() {
  rocksdb::ColumnFamilyOptions cf;
  cf.compression = rocksdb::kLZ4Compression;
  cf.bottommost_compression = rocksdb::kZSTD;
  // Images of 64 KiB and more go to blob files: compaction then rewrites only small records.
  cf.enable_blob_files = true;
  cf.min_blob_size = 64 * 1024;
  cf.blob_compression_type = rocksdb::kLZ4Compression;
  // All records of a key share its 32 key bytes: a bloom filter on that prefix makes a miss cheap.
  cf.prefix_extractor.reset(rocksdb::NewFixedPrefixTransform(k_key_size));
  rocksdb::BlockBasedTableOptions table;
  table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(10));
  table.whole_key_filtering = true;
  cf.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  return cf;
}

}  // namespace

Expected<std::unique_ptr<Store::Impl>> Store::Impl::open(const StoreOptions& options) {
  std::error_code ec;
  std::filesystem::create_directories(options.path, ec);
  if (ec) {
    return make_error(ErrorCode::k_failed_precondition,
                      "cannot create the database folder " + options.path.string() + ": " + ec.message());
  }
  rocksdb::DBOptions db_options;
  db_options.create_if_missing = true;
  db_options.create_missing_column_families = true;
  db_options.max_background_jobs = 2;

  rocksdb::ColumnFamilyOptions side = side_family_options();
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
      {"host", side},
      {"device", side},
      {"meta", rocksdb::ColumnFamilyOptions()},
  };
  std::unique_ptr<Impl> store(new Impl());
  store->m_host_image_check = options.host_image_check;
  store->m_max_bytes = options.max_bytes;
  if (options.hot_cache_bytes > 0) store->m_hot = std::make_unique<HotCache>(options.hot_cache_bytes);
  store->m_access_flush_interval = options.access_flush_interval;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(db_options, options.path.string(), families, &store->m_handles, &db);
  if (!s.ok()) {
    return make_error(ErrorCode::k_failed_precondition,
                      "cannot open the database at " + options.path.string() + ": " + s.ToString());
  }
  store->m_db.reset(db);
  store->m_host = store->m_handles[1];
  store->m_device = store->m_handles[2];
  store->m_meta = store->m_handles[3];

  std::string format;
  s = db->Get(rocksdb::ReadOptions(), store->m_meta, k_format_key, &format);
  if (s.IsNotFound()) {
    s = db->Put(rocksdb::WriteOptions(), store->m_meta, k_format_key, k_format_value);
    if (!s.ok()) return storage_error("writing the format marker", s);
  } else if (!s.ok()) {
    return storage_error("reading the format marker", s);
  } else if (format != k_format_value) {
    return make_error(ErrorCode::k_failed_precondition, "the database at " + options.path.string() + " has format '" +
                                                            format + "', this kcached reads '" +
                                                            std::string(k_format_value) + "'");
  }
  auto load = [&](std::string_view key, std::atomic<std::uint64_t>& into) {
    std::string value;
    if (db->Get(rocksdb::ReadOptions(), store->m_meta, key, &value).ok()) into = decode_u64(value);
  };
  load(k_entries_key, store->m_entries);
  load(k_images_key, store->m_images);
  load(k_bytes_key, store->m_bytes);
  if (auto indexed = store->index_access_times(); !indexed) return indexed.error();
  store->m_background = std::thread([s = store.get()] { s->background(); });
  return store;
}

Store::Impl::~Impl() {
  {
    std::lock_guard lock(m_background_mutex);
    m_stopping = true;
  }
  m_background_wake.notify_all();
  if (m_background.joinable()) m_background.join();
  if (!m_db) return;
  if (auto flushed = flush_access_times(); !flushed) spdlog::warn("{}", flushed.error().message);
  for (rocksdb::ColumnFamilyHandle* h : m_handles) m_db->DestroyColumnFamilyHandle(h);
  m_db->Close();
}

rocksdb::ColumnFamilyHandle* Store::Impl::family(Side side) const { return side == Side::host ? m_host : m_device; }

Expected<void> Store::Impl::put(Side side, const Key& key, const EntryRecord& record, std::span<const Image> images,
                          Put how) {
  // Copied only where the hot cache keeps them; otherwise shared without an owner, for this call.
  bool kept = m_hot && how == Put::verified;
  std::vector<std::shared_ptr<const Image>> shared;
  shared.reserve(images.size());
  for (const Image& image : images) {
    shared.push_back(kept ? std::make_shared<const Image>(image) : std::shared_ptr<const Image>(std::shared_ptr<const void>(), &image));
  }
  return put_shared(side, key, record, shared, how);
}

Expected<void> Store::Impl::put_shared(Side side, const Key& key, const EntryRecord& record,
                                 std::span<const std::shared_ptr<const Image>> images, Put how) {
  for (const auto& shared : images) {
    const Image& image = *shared;
    auto refuse = [&](const std::string& why) {
      std::string message = "store: refusing " + std::string(side_name(side)) + " entry " + key.hex() + ", image " +
                            image.meta.arch + "." + std::string(kind_name(image.meta.kind)) + ": " + why;
      spdlog::error("{}", message);
      return make_error(ErrorCode::k_internal, message);
    };
    if (image.meta.size != image.data.size() || (how == Put::check && sha256(image.data) != image.meta.sha256)) {
      return refuse("it does not match its digest");
    }
    // The host side holds objects, each checked by the wall, and beside a build step's object the
    // text its compile printed (printed again on a hit, never linked).
    if (!image_belongs_to(side, image.meta.kind, image.meta.arch)) return refuse("the image kind belongs to the other side");
    if (side != Side::host || image.meta.kind != ImageKind::object) continue;
    if (!m_host_image_check) return refuse("no host image check is configured");
    if (auto checked = m_host_image_check(image.data); !checked) return refuse(checked.error().message);
  }
  std::uint64_t incoming = 0;
  for (const auto& image : images) incoming += image->meta.size;
  if (m_max_bytes > 0 && incoming > m_max_bytes) {
    return make_error(ErrorCode::k_resource_exhausted,
                      "not cached: the images of " + key.hex() + " (" + std::to_string(incoming) +
                          " bytes) are larger than the whole cache (--max-size " + std::to_string(m_max_bytes) + ")");
  }

  std::lock_guard lock(m_write_mutex);
  rocksdb::ColumnFamilyHandle* cf = family(side);
  rocksdb::WriteBatch batch;
  std::string existing;
  rocksdb::Status s = m_db->Get(rocksdb::ReadOptions(), cf, entry_key(key), &existing);
  bool is_new = s.IsNotFound();
  if (!is_new && !s.ok()) return storage_error("reading entry", s);
  batch.Put(cf, entry_key(key), encode_entry(side, record));

  std::uint64_t replaced_bytes = 0, replaced_images = 0;
  for (const auto& shared : images) {
    const Image& image = *shared;
    std::string meta_key = image_key(key, k_meta_tag, image.meta.id());
    s = m_db->Get(rocksdb::ReadOptions(), cf, meta_key, &existing);
    if (s.ok()) {
      if (auto old = decode_meta(existing, image.meta.arch)) {
        replaced_bytes += old->size;
        ++replaced_images;
      }
    } else if (!s.IsNotFound()) {
      return storage_error("reading image metadata", s);
    }
    batch.Put(cf, meta_key, encode_meta(image.meta));
    batch.Put(cf, image_key(key, k_payload_tag, image.meta.id()), image.data);
  }
  // Make room first: usage never passes the cap, even between background evictions.
  if (m_max_bytes > 0 && m_bytes + incoming - std::min<std::uint64_t>(m_bytes, replaced_bytes) > m_max_bytes) {
    if (auto flushed = flush_access_times_locked(); !flushed) return flushed.error();
    auto evicted = evict_locked(m_max_bytes + replaced_bytes - incoming, SIZE_MAX, std::pair{side, key});
    if (!evicted) return evicted.error();
  }

  // This write is an access too: the entry becomes the most recently used.
  std::uint64_t now = unix_ms_now();
  if (m_db->Get(rocksdb::ReadOptions(), m_meta, atime_key(side, key), &existing).ok()) {
    batch.Delete(m_meta, lru_key(decode_u64(existing), side, key));
  }
  batch.Put(m_meta, atime_key(side, key), encode_u64(now));
  batch.Put(m_meta, lru_key(now, side, key), "");

  std::uint64_t entries = m_entries + (is_new ? 1 : 0);
  std::uint64_t count = m_images - std::min<std::uint64_t>(m_images, replaced_images) + images.size();
  std::uint64_t bytes = m_bytes - std::min<std::uint64_t>(m_bytes, replaced_bytes) + incoming;
  batch.Put(m_meta, k_entries_key, encode_u64(entries));
  batch.Put(m_meta, k_images_key, encode_u64(count));
  batch.Put(m_meta, k_bytes_key, encode_u64(bytes));
  s = m_db->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) return storage_error("writing entry", s);
  ++m_changes;
  // Images of the same (arch, kind) were replaced. Dropped after the write, never before: a read
  // between a drop and the write would find the old image and cache it for good.
  if (m_hot) {
    m_hot->drop(side, key);
    if (how == Put::verified) {
      std::uint64_t generation = m_hot->generation();
      for (const auto& image : images) m_hot->insert(side, key, image, generation);
    }
  }
  m_entries = entries;
  m_images = count;
  m_bytes = bytes;
  if (m_max_bytes > 0 && bytes > m_max_bytes / 10 * 9) wake_background();
  return {};
}

namespace {
std::string pending_name(Side side, const Key& key) { return static_cast<char>(side) + std::string(key.bytes()); }
}  // namespace

void Store::Impl::put_soon(Side side, const Key& key, const EntryRecord& record, std::vector<Image> images) {
  if (side == Side::host) {
    if (auto put_now = put(side, key, record, images, Put::verified); !put_now) {
      spdlog::warn("store: {}", put_now.error().message);
    }
    return;
  }
  Pending pending{record, {}};
  for (Image& image : images) pending.images.push_back(std::make_shared<const Image>(std::move(image)));
  {
    std::lock_guard lock(m_pending_mutex);
    std::string name = pending_name(side, key);
    if (!m_pending.contains(name)) m_pending_order.push_back(name);
    m_pending[name] = std::move(pending);
  }
  wake_background();
}

const Store::Impl::Pending* Store::Impl::pending_locked(Side side, const Key& key) const {
  auto it = m_pending.find(pending_name(side, key));
  return it == m_pending.end() ? nullptr : &it->second;
}

void Store::Impl::write_pending() {
  for (;;) {
    std::string name;
    Pending pending;
    {
      std::lock_guard lock(m_pending_mutex);
      if (m_pending_order.empty()) return;
      name = m_pending_order.front();
      pending = m_pending.at(name);
    }
    Side side = static_cast<Side>(name[0]);
    Key key = key_from_bytes(std::string_view(name).substr(1));
    if (auto written = put_shared(side, key, pending.record, pending.images, Put::verified); !written) {
      spdlog::warn("store: {}", written.error().message);
    }
    // Dropped from memory only once written: a read in between finds one or the other.
    std::lock_guard lock(m_pending_mutex);
    m_pending_order.pop_front();
    m_pending.erase(name);
  }
}

Expected<std::vector<ImageMeta>> Store::Impl::list(Side side, const Key& key, Reach reach) {
  if (m_hot) {
    if (auto cached = m_hot->find_list(side, key)) {
      note_access(side, key);
      return *cached;
    }
  }
  // put_soon's entry, read before RocksDB: the background writer drops it only once written, so
  // one of the two reads sees it (read after, a write landing in between was missed by both).
  std::vector<ImageMeta> pending_metas;
  {
    std::lock_guard lock(m_pending_mutex);
    if (const Pending* pending = pending_locked(side, key)) {
      for (const auto& image : pending->images) pending_metas.push_back(image->meta);
    }
  }
  std::uint64_t generation = m_hot ? m_hot->generation() : 0;
  std::string lower = std::string(key.bytes()) + k_meta_tag;
  std::string upper = std::string(key.bytes()) + static_cast<char>(k_meta_tag + 1);
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  // RocksDB's own non-blocking read: a block not in the block cache is Incomplete, not read.
  if (reach == Reach::memory) ro.read_tier = rocksdb::kBlockCacheTier;
  std::unique_ptr<rocksdb::Iterator> it(m_db->NewIterator(ro, family(side)));
  std::vector<ImageMeta> out;
  for (it->Seek(lower); it->Valid(); it->Next()) {
    std::string_view k = it->key().ToStringView();
    // key | 'M' | arch | '\0' | kind
    std::string_view arch = k.substr(k_key_size + 1, k.size() - k_key_size - 3);
    auto meta = decode_meta(it->value().ToStringView(), std::string(arch));
    if (!meta) {
      drop_corrupt_entry(side, key, "undecodable image metadata");
      return std::vector<ImageMeta>{};
    }
    out.push_back(std::move(*meta));
  }
  if (it->status().IsCorruption()) {
    drop_corrupt_entry(side, key, it->status().ToString());
    return std::vector<ImageMeta>{};
  }
  if (it->status().IsIncomplete()) return would_block();
  if (!it->status().ok()) return storage_error("listing images", it->status());
  if (m_hot && !out.empty()) m_hot->insert_list(side, key, out, generation);
  if (out.empty()) out = std::move(pending_metas);
  if (!out.empty()) note_access(side, key);
  return out;
}

Expected<std::shared_ptr<const Image>> Store::Impl::get(Side side, const Key& key, const ImageRequest& which,
                                                  bool* from_memory, Reach reach) {
  if (from_memory != nullptr) *from_memory = false;
  if (m_hot) {
    if (std::shared_ptr<const Image> hot = m_hot->find(side, key, which)) {
      note_access(side, key);
      if (from_memory != nullptr) *from_memory = true;
      return hot;
    }
  }
  {
    std::lock_guard lock(m_pending_mutex);
    if (const Pending* pending = pending_locked(side, key)) {
      for (const auto& image : pending->images) {
        if (image->meta.id() == which) return image;
      }
    }
  }
  if (reach == Reach::memory) return would_block();

  std::string id(1, static_cast<char>(side));
  id.append(key.bytes()).append(1, static_cast<char>(which.kind)).append(which.arch);
  std::shared_ptr<Read> read;
  bool reader = false;
  {
    std::lock_guard lock(m_reads_mutex);
    auto& slot = m_reads[id];
    std::uint64_t changes = m_changes.load();
    if (!slot || slot->changes != changes) {  // none, or one that began before a write: a new read
      slot = std::make_shared<Read>();
      slot->changes = changes;
      reader = true;
    }
    read = slot;
  }
  if (!reader) {
    ++m_shared_reads;
    std::unique_lock lock(read->mutex);
    read->done_cv.wait(lock, [&] { return read->done; });
    return read->result;
  }
  // A read that ended just before this one began has put its image in the hot cache first.
  std::shared_ptr<const Image> hot = m_hot ? m_hot->find(side, key, which) : nullptr;
  Expected<std::shared_ptr<const Image>> result = hot ? Expected<std::shared_ptr<const Image>>(hot)
                                                      : read_image(side, key, which);
  {
    std::lock_guard lock(m_reads_mutex);
    if (auto it = m_reads.find(id); it != m_reads.end() && it->second == read) m_reads.erase(it);
  }
  {
    std::lock_guard lock(read->mutex);
    read->result = result;
    read->done = true;
  }
  read->done_cv.notify_all();
  return result;
}

Expected<std::shared_ptr<const Image>> Store::Impl::read_image(Side side, const Key& key, const ImageRequest& which) {
  auto not_found = [&] {
    return make_error(ErrorCode::k_not_found, "no " + std::string(kind_name(which.kind)) + " image for " + which.arch +
                                                  " under key " + key.hex());
  };
  ++m_disk_reads;
  std::uint64_t generation = m_hot ? m_hot->generation() : 0;
  rocksdb::ColumnFamilyHandle* cf = family(side);
  std::string meta_value;
  auto image = std::make_shared<Image>();
  // Metadata and payload from one snapshot: an entry removed in between (eviction, purge) must
  // read as absent, not as a payload gone missing, which is corruption.
  rocksdb::ManagedSnapshot snapshot(m_db.get());
  rocksdb::ReadOptions meta_read;
  meta_read.snapshot = snapshot.snapshot();
  rocksdb::Status s = m_db->Get(meta_read, cf, image_key(key, k_meta_tag, which), &meta_value);
  if (s.IsNotFound()) return not_found();
  // The payload's own checksum is skipped: the SHA-256 check below is stronger, and Debian's
  // RocksDB computes CRC32c in software (7% of a 64 KiB fetch's CPU). The metadata keeps it.
  rocksdb::ReadOptions payload_read = meta_read;
  payload_read.verify_checksums = false;
  if (s.ok()) s = m_db->Get(payload_read, cf, image_key(key, k_payload_tag, which), &image->data);
  if (s.IsCorruption() || s.IsNotFound()) {
    drop_corrupt_entry(side, key, s.ToString());
    return not_found();
  }
  if (!s.ok()) return storage_error("reading image", s);
  auto meta = decode_meta(meta_value, which.arch);
  if (!meta || meta->kind != which.kind || meta->size != image->data.size() || sha256(image->data) != meta->sha256) {
    drop_corrupt_entry(side, key, "image " + which.arch + "." + std::string(kind_name(which.kind)) +
                                      " does not match its SHA-256 digest");
    return not_found();
  }
  image->meta = std::move(*meta);
  note_access(side, key);
  if (m_hot) m_hot->insert(side, key, image, generation);
  return std::shared_ptr<const Image>(std::move(image));
}

Expected<bool> Store::Impl::remove(Side side, const Key& key) {
  std::lock_guard lock(m_write_mutex);
  std::string value;
  rocksdb::Status s = m_db->Get(rocksdb::ReadOptions(), family(side), entry_key(key), &value);
  if (s.IsNotFound()) return false;
  if (!s.ok()) return storage_error("reading entry", s);
  auto removed = remove_entry_locked(side, key);
  if (!removed) return removed.error();
  return true;
}

void Store::Impl::drop_corrupt_entry(Side side, const Key& key, const std::string& why) {
  spdlog::error("store: {} entry {} is corrupt ({}); removing it, the next compile rebuilds it", side_name(side),
                key.hex(), why);
  std::lock_guard lock(m_write_mutex);
  auto removed = remove_entry_locked(side, key);
  if (!removed) spdlog::error("store: removing corrupt entry {} failed: {}", key.hex(), removed.error().message);
  ++m_corrupt;
}

Expected<std::uint64_t> Store::Impl::remove_entry_locked(Side side, const Key& key) {
  rocksdb::ColumnFamilyHandle* cf = family(side);
  // Walks the entry and metadata records only: payloads are deleted by key, never read, since
  // reading a corrupt blob would stop the walk and leave records behind.
  std::string lower(key.bytes());
  std::string upper = lower + static_cast<char>(k_meta_tag + 1);
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
  ro.verify_checksums = false;  // removing: a corrupt block must not stop us
  std::unique_ptr<rocksdb::Iterator> it(m_db->NewIterator(ro, cf));
  rocksdb::WriteBatch batch;
  std::uint64_t entries = m_entries, count = m_images, bytes = m_bytes;
  bool had_entry = false;
  for (it->Seek(lower); it->Valid(); it->Next()) {
    std::string_view k = it->key().ToStringView();
    if (k.size() > k_key_size && k[k_key_size] == k_entry_tag) had_entry = true;
    if (k.size() > k_key_size && k[k_key_size] == k_meta_tag) {
      std::string arch(k.substr(k_key_size + 1, k.size() - k_key_size - 3));
      auto meta = decode_meta(it->value().ToStringView(), arch);
      if (count > 0) --count;
      if (meta) bytes -= std::min(bytes, meta->size);
      std::string payload_key(k);
      payload_key[k_key_size] = k_payload_tag;
      batch.Delete(cf, payload_key);
    }
    batch.Delete(cf, it->key());
  }
  if (had_entry && entries > 0) --entries;
  std::string atime;
  if (m_db->Get(rocksdb::ReadOptions(), m_meta, atime_key(side, key), &atime).ok()) {
    batch.Delete(m_meta, lru_key(decode_u64(atime), side, key));
    batch.Delete(m_meta, atime_key(side, key));
  }
  batch.Put(m_meta, k_entries_key, encode_u64(entries));
  batch.Put(m_meta, k_images_key, encode_u64(count));
  batch.Put(m_meta, k_bytes_key, encode_u64(bytes));
  rocksdb::Status s = m_db->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) return storage_error("removing entry", s);
  ++m_changes;
  if (m_hot) m_hot->drop(side, key);  // after the write, as in put()
  std::uint64_t freed = m_bytes - bytes;
  m_entries = entries;
  m_images = count;
  m_bytes = bytes;
  return freed;
}

StoreStats Store::Impl::stats() const {
  return {m_entries,      m_images, m_bytes, m_corrupt, m_evictions, m_evicted_bytes, m_hot ? m_hot->hits() : 0,
          m_hot ? m_hot->bytes() : 0, m_disk_reads, m_shared_reads};
}
Expected<void> Store::Impl::flush() {
  rocksdb::Status s = m_db->Flush(rocksdb::FlushOptions(), m_handles);
  if (!s.ok()) return storage_error("flushing", s);
  return {};
}

// ---- Store: its interface, over Impl ----------------------------------------------------------

Expected<std::unique_ptr<Store>> Store::open(const StoreOptions& options) {
  auto impl = Impl::open(options);
  if (!impl) return impl.error();
  return std::unique_ptr<Store>(new Store(std::move(*impl)));
}

Store::Store(std::unique_ptr<Impl> impl) : m_impl(std::move(impl)) {}

Store::~Store() = default;

Expected<void> Store::put(Side side, const Key& key, const EntryRecord& record, std::span<const Image> images,
                          Put how) {
  return m_impl->put(side, key, record, images, how);
}

void Store::put_soon(Side side, const Key& key, const EntryRecord& record, std::vector<Image> images) {
  m_impl->put_soon(side, key, record, std::move(images));
}

Expected<std::vector<ImageMeta>> Store::list(Side side, const Key& key, Reach reach) {
  return m_impl->list(side, key, reach);
}

Expected<std::shared_ptr<const Image>> Store::get(Side side, const Key& key, const ImageRequest& which,
                                                  bool* from_memory, Reach reach) {
  return m_impl->get(side, key, which, from_memory, reach);
}

StoreStats Store::stats() const { return m_impl->stats(); }

std::uint64_t Store::max_bytes() const { return m_impl->max_bytes(); }

Expected<std::uint64_t> Store::evict(std::uint64_t target) { return m_impl->evict(target); }

Expected<bool> Store::remove(Side side, const Key& key) { return m_impl->remove(side, key); }

Expected<void> Store::flush_access_times() { return m_impl->flush_access_times(); }

Expected<VerifyReport> Store::verify(bool repair) { return m_impl->verify(repair); }

Expected<void> Store::flush() { return m_impl->flush(); }

}  // namespace kcache::server
