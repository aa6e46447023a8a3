// The store's record keys and value encodings (FORMAT.md), shared by the store's parts:
// reads and writes (store.cpp), access times and eviction (lru.cpp) and the checker (verify.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "image.hpp"
#include "kcache/job.hpp"
#include "kcache/key.hpp"
#include "store/store.hpp"

namespace rocksdb {
class Status;
}

namespace kcache::server::records {

inline constexpr std::string_view k_format_key = "format";
inline constexpr std::string_view k_format_value = "kcache-store-1";
inline constexpr std::string_view k_entries_key = "usage.entries";
inline constexpr std::string_view k_images_key = "usage.images";
inline constexpr std::string_view k_bytes_key = "usage.bytes";
// Present once every entry has an access time (databases from before eviction get them at open).
inline constexpr std::string_view k_lru_marker_key = "lru.version";
inline constexpr std::size_t k_key_size = 32;

// Record suffixes after the 32 key bytes in the side families.
inline constexpr char k_entry_tag = 'E';
inline constexpr char k_meta_tag = 'M';
inline constexpr char k_payload_tag = 'P';

// Prefixes of the access-time records in `meta` (bytes no text key there starts with).
inline constexpr char k_atime_prefix = '\x01';  // 0x01 side K -> u64 access time (ms)
inline constexpr char k_lru_prefix = '\x02';    // 0x02 be64(access ms) side K -> empty: oldest first

std::string entry_key(const Key& key);
std::string image_key(const Key& key, char tag, const ImageRequest& which);

std::string encode_entry(Side side, const EntryRecord& record);
struct DecodedEntry {
  Side side = Side::device;
  EntryRecord record;
};
std::optional<DecodedEntry> decode_entry(std::string_view value);

std::string encode_meta(const ImageMeta& meta);
// Decodes an image meta record; `arch` comes from the record's key.
std::optional<ImageMeta> decode_meta(std::string_view value, std::string arch);

// (arch, kind) from the part of an 'M' or 'P' record key after the tag: arch 0x00 kind.
std::optional<ImageRequest> decode_image_suffix(std::string_view suffix);

std::string encode_u64(std::uint64_t v);
std::uint64_t decode_u64(std::string_view s);

std::string atime_key(Side side, const Key& key);
std::string lru_key(std::uint64_t atime_ms, Side side, const Key& key);
// The side and key of an LRU record key; nullopt when malformed.
std::optional<std::pair<Side, Key>> parse_lru_key(std::string_view lru_key);

Key key_from_bytes(std::string_view bytes);  // the first 32 bytes

// Access times are wall-clock milliseconds since the Unix epoch.
std::uint64_t unix_ms_now();

// INTERNAL: "store: WHAT: rocksdb's message".
Error storage_error(const std::string& what, const rocksdb::Status& status);

}  // namespace kcache::server::records
