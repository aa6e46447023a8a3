// Content-hash keys: SHA-256 over a canonical, tagged encoding of a job and the toolchain
// fingerprint. The encoding is specified in common/KEY_FORMAT.md; server and client both call
// compute_key, so a client can fetch by key without uploading the module.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kcache/expected.hpp"
#include "kcache/job.hpp"
#include "kcache/sha256.hpp"

namespace kcache {

inline constexpr std::uint32_t k_key_format_version = 1;

struct Key {
  Digest digest{};
  std::string hex() const { return to_hex(digest); }
  std::string_view bytes() const { return as_bytes(digest); }
  bool operator==(const Key&) const = default;
};

// One field of a key's encoding: tag (1 byte) | length (8 bytes, little endian) | bytes, so no two
// different jobs (or steps, kcache/step.hpp) encode to the same byte string.
void hash_tagged_field(Sha256& h, std::uint8_t tag, std::string_view value);

// Parses the 64-hex-digit form a key travels in.
Expected<Key> parse_key(std::string_view hex);

// The key of a job. `spec` must be canonical (see canonicalize); `modules` are the job's module
// bytes in order, one per spec.module_count(); `fingerprint` identifies the toolchain
// (Capabilities.fingerprint).
Key compute_key(const JobSpec& spec, std::span<const std::string_view> modules, const Digest& fingerprint);
// The key of a one-module job.
Key compute_key(const JobSpec& spec, std::string_view module, const Digest& fingerprint);

}  // namespace kcache
