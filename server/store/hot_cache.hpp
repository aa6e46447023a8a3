// Recently read images, kept in memory after their digest check, so a repeated fetch skips the
// RocksDB read, the blob's LZ4 and CRC32c and the SHA-256 re-check (about 45% of the daemon's CPU
// for a 64 KiB fetch; bench/README.md). Keyed by (side, key, arch, kind), bounded in bytes,
// least recently used dropped first. Beside a key's images, the list of its images' metadata
// (what Store::list reads with a RocksDB iterator, which every Fetch's selection and Lookup need:
// 7% of the daemon's CPU on a 4 KiB hit load). The store drops a key's images whenever the entry is
// written or removed, after the write, and an image read while that happened is not cached
// (generations): a read that began before the drop may have found the old bytes.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "image.hpp"
#include "kcache/key.hpp"

namespace kcache::server {

class HotCache {
 public:
  explicit HotCache(std::uint64_t max_bytes) : m_max_bytes(max_bytes) {}

  // The cached image, or null.
  std::shared_ptr<const Image> find(Side side, const Key& key, const ImageRequest& which);
  // Taken before reading an image from the store; insert() keeps the image only if no key was
  // dropped since.
  std::uint64_t generation() const;
  void insert(Side side, const Key& key, std::shared_ptr<const Image> image, std::uint64_t generation);
  // The metadata of every image of (side, key), as Store::list read it, or null; and keeping it,
  // under the same rule of generations as images.
  std::shared_ptr<const std::vector<ImageMeta>> find_list(Side side, const Key& key);
  void insert_list(Side side, const Key& key, std::vector<ImageMeta> metas, std::uint64_t generation);
  // Drops every image of (side, key), and its list.
  void drop(Side side, const Key& key);

  std::uint64_t bytes() const;
  std::uint64_t hits() const;

 private:
  struct Slot {
    std::shared_ptr<const Image> image;  // or, in the slot named by the prefix alone:
    std::shared_ptr<const std::vector<ImageMeta>> list;
    std::uint64_t bytes = 0;
    std::list<std::string>::iterator lru;
  };
  static std::string prefix(Side side, const Key& key);
  void insert_locked(std::string id, Slot slot);  // makes room, then keeps it (m_mutex held)

  const std::uint64_t m_max_bytes;
  mutable std::mutex m_mutex;  // guards everything below
  std::map<std::string, Slot> m_slots;  // side | key | arch '\0' kind, so a key's images are adjacent
  std::list<std::string> m_lru;         // most recent first
  std::uint64_t m_bytes = 0, m_generation = 0, m_hits = 0;
};

}  // namespace kcache::server
