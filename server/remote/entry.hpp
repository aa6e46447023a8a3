// How an entry lives in Redis, and its HMAC. One Redis hash per cache key, hash-tagged so that
// the entry and its leases share one cluster slot:
//
//   kcache:{d:KEYHEX}              the entry (d: device, h: host)
//     r                            the entry record (store/records.hpp encode_entry; descriptive)
//     m:ARCH.KIND                  the image's metadata (encode_meta) followed by a 32-byte HMAC tag
//     i:ARCH.KIND                  the image's bytes
//   kcache:{d:KEYHEX}:lease:FLIGHT one compile's lease (lease.cpp)
//
// The tag is HMAC-SHA-256 under the fleet secret over the side, key, toolchain fingerprint and
// the encoded metadata (which holds arch, kind, size and digest). Bytes read from Redis are
// hostile: an image is served only when its metadata decodes, its tag is valid, and its bytes
// match the size and digest the tag covers. A field missing its other half is a miss.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "image.hpp"
#include "kcache/expected.hpp"
#include "kcache/key.hpp"
#include "store/store.hpp"

namespace kcache::server::remote {

// The fleet's HMAC key (--remote-secret-file): every daemon of a fleet holds the same one.
class FleetSecret {
 public:
  static constexpr std::size_t k_min_bytes = 32;
  static constexpr std::size_t k_max_bytes = 4096;
  // The file's bytes less one trailing newline: FAILED_PRECONDITION naming the file when it
  // cannot be read, is shorter than k_min_bytes or longer than k_max_bytes.
  static Expected<FleetSecret> read(const std::filesystem::path& file);
  explicit FleetSecret(std::string bytes) : m_bytes(std::move(bytes)) {}

  Digest tag(std::string_view message) const;  // HMAC-SHA-256

 private:
  std::string m_bytes;
};

// The Redis key of (side, key)'s entry, and the hash tag its leases share.
std::string entry_key(Side side, const Key& key);
// What one compile makes: (side, key) and the images asked for, in order. Identical requests
// share a flight, in one daemon (coalescing) and across the fleet (its lease).
std::string flight_of(Side side, const Key& key, const std::vector<ImageRequest>& images);
// The Redis key of the lease on compiling `flight`.
std::string lease_key(Side side, const Key& key, std::string_view flight);

using Field = std::pair<std::string, std::string>;

// The fields of an entry holding `images` (record first), tagged under `secret`.
std::vector<Field> encode_fields(const FleetSecret& secret, Side side, const Key& key, const Digest& fingerprint,
                                 const EntryRecord& record, std::span<const Image> images);

struct DecodedEntry {
  EntryRecord record;
  std::vector<Image> images;         // each verified
  std::vector<std::string> rejected;  // why each refused image was refused (bad tag, digest...)
  bool partial = false;              // some image lacked its metadata or bytes, or no record
};

// Decodes an entry's fields as HGETALL returns them (name, value, name, value...); the images
// take their bytes from `flat_fields` without a copy. Never throws and never trusts a length it
// was given: every refusal is named in `rejected`.
DecodedEntry decode_fields(const FleetSecret& secret, Side side, const Key& key, const Digest& fingerprint,
                           std::vector<std::string> flat_fields);

}  // namespace kcache::server::remote
