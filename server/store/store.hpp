// The persistent cache: RocksDB with one column family per side (host, device) and one for
// bookkeeping (meta). Layout and value encodings are specified in FORMAT.md beside this file.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "kcache/expected.hpp"
#include "kcache/job.hpp"
#include "kcache/key.hpp"
#include "image.hpp"

namespace rocksdb {
class ColumnFamilyHandle;
class DB;
}  // namespace rocksdb

namespace kcache::server {

// Describes the job an entry came from (for people and `verify`; never used to answer a lookup).
struct EntryRecord {
  InputFormat format = InputFormat::llvm_text;
  std::string target;
  std::uint64_t created_unix = 0;
};

struct StoreStats {
  std::uint64_t entries = 0;
  std::uint64_t images = 0;
  std::uint64_t bytes = 0;  // image payload bytes
  std::uint64_t corrupt_dropped = 0;
};

// Checks a host image before it is written (the daemon passes check_host_object, which reads the
// object's symbol table). Without one, the store refuses every host image: it fails closed.
using HostImageCheck = std::function<Expected<void>(std::string_view object)>;

struct StoreOptions {
  std::filesystem::path path;
  HostImageCheck host_image_check;
};

class Store {
 public:
  // Opens (creating if needed) the database at options.path.
  static Expected<std::unique_ptr<Store>> open(const StoreOptions& options);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Writes the entry record and every image under (side, key) in one atomic WriteBatch,
  // replacing images of the same (arch, kind). Refuses (INTERNAL, logged) an image whose digest
  // does not match its data, whose kind belongs to the other side, or, on the host side, that
  // the host image check rejects.
  Expected<void> put(Side side, const Key& key, const EntryRecord& record, std::span<const Image> images);

  // The metadata of every image stored under (side, key); empty when the key is absent.
  Expected<std::vector<ImageMeta>> list(Side side, const Key& key);

  // One image with its bytes, verified against its digest. NOT_FOUND when absent. A corrupt
  // image (digest mismatch or RocksDB checksum failure) removes the whole entry and is NOT_FOUND.
  Expected<Image> get(Side side, const Key& key, const ImageRequest& which);

  StoreStats stats() const;

  // Flushes memtables to disk (shutdown); the WAL already makes acknowledged writes durable
  // against a crash of the process.
  Expected<void> flush();

 private:
  Store() = default;
  rocksdb::ColumnFamilyHandle* family(Side side) const;
  void drop_corrupt_entry(Side side, const Key& key, const std::string& why);
  Expected<void> remove_entry_locked(Side side, const Key& key);

  std::unique_ptr<rocksdb::DB> m_db;
  std::vector<rocksdb::ColumnFamilyHandle*> m_handles;  // default, host, device, meta
  rocksdb::ColumnFamilyHandle* m_host = nullptr;
  rocksdb::ColumnFamilyHandle* m_device = nullptr;
  rocksdb::ColumnFamilyHandle* m_meta = nullptr;

  // Serialises writers so the usage counters in `meta` change in the same batch as the data.
  HostImageCheck m_host_image_check;
  std::mutex m_write_mutex;
  std::atomic<std::uint64_t> m_entries{0}, m_images{0}, m_bytes{0}, m_corrupt{0};  // lock-free reads
};

}  // namespace kcache::server
