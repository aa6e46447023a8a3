// SHA-256 (OpenSSL) for keys and image digests, and hex conversion.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace kcache {

using Digest = std::array<std::uint8_t, 32>;

// Incremental SHA-256; update() any number of times, then finish() once.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(std::string_view bytes);
  Digest finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

Digest sha256(std::string_view bytes);
std::string sha256_hex(std::string_view bytes);
// The SHA-256 of a file's bytes, read in pieces; nullopt when it cannot be read.
std::optional<Digest> sha256_file(const std::string& path);

std::string to_hex(std::string_view bytes);
std::string to_hex(const Digest& digest);
// Parses exactly 64 hex digits (either case); nullopt otherwise.
std::optional<Digest> digest_from_hex(std::string_view hex);
// Any even-length hex string as bytes; nullopt for anything else.
std::optional<std::string> bytes_from_hex(std::string_view hex);

inline std::string_view as_bytes(const Digest& d) {
  return {reinterpret_cast<const char*>(d.data()), d.size()};
}

}  // namespace kcache
