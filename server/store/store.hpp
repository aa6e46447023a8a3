// The persistent cache: RocksDB with one column family per side (host, device) and one for
// bookkeeping (meta). Layout and value encodings are specified in FORMAT.md beside this file.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "image.hpp"
#include "kcache/expected.hpp"
#include "kcache/job.hpp"
#include "kcache/key.hpp"

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
  std::uint64_t evictions = 0;      // entries evicted since open
  std::uint64_t evicted_bytes = 0;  // their payload bytes
  std::uint64_t hot_cache_hits = 0;   // reads answered by the hot cache
  std::uint64_t hot_cache_bytes = 0;  // bytes it holds
  std::uint64_t disk_reads = 0;       // images read from RocksDB (and hashed) by get()
  std::uint64_t shared_reads = 0;     // get()s that waited for another's read of the same image
};

// What Store::verify found.
struct VerifyProblem {
  Side side = Side::device;
  std::string key_hex;
  std::string what;
};
struct VerifyReport {
  std::uint64_t entries = 0, images = 0, bytes = 0;  // good ones, as counted by the walk
  std::vector<VerifyProblem> problems;               // one per bad entry
  std::uint64_t removed = 0;                         // bad entries removed (repair)
  bool counters_wrong = false;                       // the usage counters disagreed with the walk
  std::uint64_t access_times_added = 0;              // entries that had no access time (repair adds one)
};

// Checks a host image before it is written (the daemon passes check_host_object, which reads the
// object's symbol table). Without one, the store refuses every host image: it fails closed.
using HostImageCheck = std::function<Expected<void>(std::string_view object)>;

struct StoreOptions {
  std::filesystem::path path;
  HostImageCheck host_image_check;
  // Most payload bytes kept (--max-size); 0: no limit. Least recently used entries are evicted,
  // whole, by a background thread from 90% of it down to 80%, and by a write that would
  // otherwise pass it: usage never exceeds it.
  std::uint64_t max_bytes = 0;
  // How often recorded accesses are written to `meta` (reads only note them in memory).
  std::chrono::milliseconds access_flush_interval{1000};
  // Memory for recently read images (--hot-cache-size); 0: none.
  std::uint64_t hot_cache_bytes = 256ULL << 20;
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
  // the host image check rejects; RESOURCE_EXHAUSTED when the images alone exceed max_bytes.
  // Evicts least recently used entries first when the write would pass max_bytes.
  // `verified`: the caller has just checked every image against its digest (the remote tier
  // does, before the HMAC means anything), so put does not hash them again, and keeps them in the
  // hot cache, since they are about to be read.
  enum class Put { check, verified };
  Expected<void> put(Side side, const Key& key, const EntryRecord& record, std::span<const Image> images,
                     Put how = Put::check);

  // put(..., Put::verified) on the background thread, so the caller does not wait for RocksDB
  // (a remote hit, served at once). Until written, list() and get() answer from the images held
  // here. Host entries are written at once instead: the host image check runs before anything
  // of them can be read.
  void put_soon(Side side, const Key& key, const EntryRecord& record, std::vector<Image> images);

  // How far a read may go. `anywhere`: RocksDB's files too, so it may wait for the disk.
  // `memory`: only what is in memory (the hot cache, images about to be written, RocksDB's
  // memtables and block cache), for callers that must never wait (the HTTP listener's event
  // threads); what would need the disk is WOULD_BLOCK (is_would_block) instead.
  enum class Reach { anywhere, memory };

  // The metadata of every image stored under (side, key); empty when the key is absent. A
  // found key counts as used now (for eviction).
  Expected<std::vector<ImageMeta>> list(Side side, const Key& key, Reach reach = Reach::anywhere);

  // One image with its bytes, verified against its digest. NOT_FOUND when absent. A corrupt
  // image (digest mismatch or RocksDB checksum failure) removes the whole entry and is NOT_FOUND.
  // Served from the hot cache (store/hot_cache.hpp) when the image was read recently. Concurrent
  // gets of one image read it once: the others wait for that read and share its copy (16 clients
  // asking for a 16 MiB image the hot cache had not yet seen held 16 copies of it at once).
  // `from_memory`, if given, says whether the hot cache answered.
  // With Reach::memory only the hot cache and images about to be written answer: a payload
  // read from RocksDB is also hashed, which is no work for an event thread.
  Expected<std::shared_ptr<const Image>> get(Side side, const Key& key, const ImageRequest& which,
                                             bool* from_memory = nullptr, Reach reach = Reach::anywhere);

  StoreStats stats() const;
  std::uint64_t max_bytes() const;

  // Evicts least recently used entries until usage is at most `target` bytes; returns how many.
  // The background thread calls it; it is public for tests and operators.
  Expected<std::uint64_t> evict(std::uint64_t target);

  // Removes the entry whole; false when it was not there.
  Expected<bool> remove(Side side, const Key& key);

  // Writes the access times noted since the last call (the background thread does so every
  // access_flush_interval).
  Expected<void> flush_access_times();

  // Walks every record of both sides: each entry must decode, each image must have its payload
  // and match its digest, host images must pass the host image check, and the usage counters
  // must match. With `repair`, bad entries are removed whole, counters rewritten and missing
  // access times added.
  Expected<VerifyReport> verify(bool repair);

  // Flushes memtables to disk (shutdown); the WAL already makes acknowledged writes durable
  // against a crash of the process.
  Expected<void> flush();

 private:
  class Impl;  // store/store_impl.hpp: RocksDB, the hot cache, the background thread
  explicit Store(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> m_impl;
};

}  // namespace kcache::server
