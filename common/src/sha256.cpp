#include "kcache/sha256.hpp"

// Nettle rather than OpenSSL: the same speed (both use the SHA-NI instructions where present),
// but no start-up work. OpenSSL 3 spends about 1.2 ms of a process's first digest loading its
// configuration and providers, a third of the budget of a cached `kcache compile` (bench/README.md).
#include <nettle/sha2.h>

#include <algorithm>
#include <cstdio>

namespace kcache {

struct Sha256::Impl {
  sha256_ctx ctx;
};

Sha256::Sha256() : m_impl(std::make_unique<Impl>()) { sha256_init(&m_impl->ctx); }

Sha256::~Sha256() = default;

void Sha256::update(std::string_view bytes) {
  sha256_update(&m_impl->ctx, bytes.size(), reinterpret_cast<const std::uint8_t*>(bytes.data()));
}

Digest Sha256::finish() {
  Digest out{};
  sha256_digest(&m_impl->ctx, out.size(), out.data());
  return out;
}

Digest sha256(std::string_view bytes) {
  sha256_ctx ctx;
  sha256_init(&ctx);
  sha256_update(&ctx, bytes.size(), reinterpret_cast<const std::uint8_t*>(bytes.data()));
  Digest out{};
  sha256_digest(&ctx, out.size(), out.data());
  return out;
}

std::string sha256_hex(std::string_view bytes) { return to_hex(sha256(bytes)); }

std::optional<Digest> sha256_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return std::nullopt;
  Sha256 h;
  std::string buf(1 << 20, '\0');
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.update({buf.data(), n});
  bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return std::nullopt;
  return h.finish();
}

std::string to_hex(std::string_view bytes) {
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    auto b = static_cast<unsigned char>(bytes[i]);
    out[2 * i] = k_digits[b >> 4];
    out[2 * i + 1] = k_digits[b & 0xf];
  }
  return out;
}

std::string to_hex(const Digest& digest) { return to_hex(as_bytes(digest)); }

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> bytes_from_hex(std::string_view hex) {
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out(hex.size() / 2, '\0');
  for (std::size_t i = 0; i < out.size(); ++i) {
    int hi = hex_value(hex[2 * i]);
    int lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = static_cast<char>(hi << 4 | lo);
  }
  return out;
}

std::optional<Digest> digest_from_hex(std::string_view hex) {
  Digest out{};
  if (hex.size() != out.size() * 2) return std::nullopt;
  auto bytes = bytes_from_hex(hex);
  if (!bytes) return std::nullopt;
  std::copy(bytes->begin(), bytes->end(), out.begin());
  return out;
}

}  // namespace kcache
