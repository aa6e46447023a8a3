#include "store/records.hpp"

#include <rocksdb/status.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace kcache::server::records {
namespace {

constexpr std::string_view k_entry_magic = "KCE1";
constexpr std::string_view k_meta_magic = "KCM1";
constexpr std::string_view k_meta_magic_sgprs = "KCM2";  // KCM1 plus each kernel's SGPRs (AMD)

class Writer {
 public:
  void bytes(std::string_view b) { m_out.append(b); }
  template <typename T>
  void uint(T v) {
    for (std::size_t i = 0; i < sizeof(T); ++i) m_out += static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff);
  }
  void str16(std::string_view s) {
    uint<std::uint16_t>(static_cast<std::uint16_t>(s.size()));
    bytes(s);
  }
  std::string take() { return std::move(m_out); }

 private:
  std::string m_out;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : m_in(in) {}
  bool bytes(std::size_t n, std::string_view& out) {
    if (m_in.size() < n) return fail();
    out = m_in.substr(0, n);
    m_in.remove_prefix(n);
    return true;
  }
  template <typename T>
  bool uint(T& v) {
    std::string_view b;
    if (!bytes(sizeof(T), b)) return false;
    std::uint64_t x = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) x |= static_cast<std::uint64_t>(static_cast<unsigned char>(b[i])) << (8 * i);
    v = static_cast<T>(x);
    return true;
  }
  bool str16(std::string& s) {
    std::uint16_t n = 0;
    std::string_view b;
    if (!uint(n) || !bytes(n, b)) return false;
    s.assign(b);
    return true;
  }
  bool done() const { return m_ok && m_in.empty(); }

 private:
  bool fail() { return m_ok = false; }
  std::string_view m_in;
  bool m_ok = true;
};

}  // namespace

std::string entry_key(const Key& key) { return std::string(key.bytes()) + k_entry_tag; }

std::string image_key(const Key& key, char tag, const ImageRequest& which) {
  std::string out(key.bytes());
  out += tag;
  out += which.arch;
  out += '\0';
  out += static_cast<char>(which.kind);
  return out;
}

std::string encode_entry(Side side, const EntryRecord& r) {
  Writer w;
  w.bytes(k_entry_magic);
  w.uint<std::uint8_t>(static_cast<std::uint8_t>(side));
  w.uint<std::uint8_t>(static_cast<std::uint8_t>(r.format));
  w.uint<std::uint64_t>(r.created_unix);
  w.str16(r.target);
  return w.take();
}

std::string encode_meta(const ImageMeta& m) {
  Writer w;
  // AMD images also record each kernel's SGPRs: a second magic, so records of other images, and
  // every record written before it existed, encode and decode as they did.
  bool sgprs = std::any_of(m.kernels.begin(), m.kernels.end(), [](const KernelInfo& k) { return k.sgprs != 0; });
  w.bytes(sgprs ? k_meta_magic_sgprs : k_meta_magic);
  w.uint<std::uint8_t>(static_cast<std::uint8_t>(m.kind));
  w.uint<std::uint64_t>(m.size);
  w.bytes(as_bytes(m.sha256));
  w.uint<std::uint16_t>(static_cast<std::uint16_t>(m.kernels.size()));
  for (const KernelInfo& k : m.kernels) {
    w.str16(k.name);
    w.uint(k.registers);
    w.uint(k.shared_bytes);
    w.uint(k.local_bytes);
    w.uint(k.spill_stores);
    w.uint(k.spill_loads);
    if (sgprs) w.uint(k.sgprs);
  }
  w.uint<std::uint16_t>(static_cast<std::uint16_t>(m.stubbed.size()));
  for (const std::string& s : m.stubbed) w.str16(s);
  // Optional trailing section (CUDA C++ jobs): absent in images of other jobs and in every
  // record written before it existed, which decode as they did.
  if (!m.lowered_names.empty()) {
    w.uint<std::uint16_t>(static_cast<std::uint16_t>(m.lowered_names.size()));
    for (const auto& [expression, lowered] : m.lowered_names) {
      w.str16(expression);
      w.str16(lowered);
    }
  }
  return w.take();
}

std::optional<ImageMeta> decode_meta(std::string_view value, std::string arch) {
  Reader r(value);
  ImageMeta m;
  m.arch = std::move(arch);
  std::string_view magic, digest;
  std::uint8_t kind = 0;
  std::uint16_t kernels = 0;
  if (!r.bytes(4, magic) || (magic != k_meta_magic && magic != k_meta_magic_sgprs) || !r.uint(kind) ||
      !r.uint(m.size) || !r.bytes(32, digest) || !r.uint(kernels)) {
    return std::nullopt;
  }
  bool sgprs = magic == k_meta_magic_sgprs;
  if (kind < 1 || kind > 7) return std::nullopt;
  m.kind = static_cast<ImageKind>(kind);
  std::memcpy(m.sha256.data(), digest.data(), 32);
  for (std::uint16_t i = 0; i < kernels; ++i) {
    KernelInfo k;
    if (!r.str16(k.name) || !r.uint(k.registers) || !r.uint(k.shared_bytes) || !r.uint(k.local_bytes) ||
        !r.uint(k.spill_stores) || !r.uint(k.spill_loads) || (sgprs && !r.uint(k.sgprs))) {
      return std::nullopt;
    }
    m.kernels.push_back(std::move(k));
  }
  std::uint16_t stubbed = 0;
  if (!r.uint(stubbed)) return std::nullopt;
  for (std::uint16_t i = 0; i < stubbed; ++i) {
    if (!r.str16(m.stubbed.emplace_back())) return std::nullopt;
  }
  if (!r.done()) {
    std::uint16_t names = 0;
    if (!r.uint(names) || names == 0) return std::nullopt;
    for (std::uint16_t i = 0; i < names; ++i) {
      auto& [expression, lowered] = m.lowered_names.emplace_back();
      if (!r.str16(expression) || !r.str16(lowered)) return std::nullopt;
    }
  }
  if (!r.done()) return std::nullopt;
  return m;
}

std::string encode_u64(std::uint64_t v) {
  Writer w;
  w.uint(v);
  return w.take();
}

std::uint64_t decode_u64(std::string_view s) {
  Reader r(s);
  std::uint64_t v = 0;
  return r.uint(v) ? v : 0;
}

std::optional<DecodedEntry> decode_entry(std::string_view value) {
  Reader r(value);
  DecodedEntry out;
  std::string_view magic;
  std::uint8_t side = 0, format = 0;
  if (!r.bytes(4, magic) || magic != k_entry_magic || !r.uint(side) || !r.uint(format) ||
      !r.uint(out.record.created_unix) || !r.str16(out.record.target) || !r.done()) {
    return std::nullopt;
  }
  if (side < 1 || side > 2 || format < 1 || format > 4) return std::nullopt;
  out.side = static_cast<Side>(side);
  out.record.format = static_cast<InputFormat>(format);
  return out;
}

std::optional<ImageRequest> decode_image_suffix(std::string_view suffix) {
  if (suffix.size() < 3 || suffix[suffix.size() - 2] != '\0') return std::nullopt;
  auto kind = static_cast<std::uint8_t>(suffix.back());
  if (kind < 1 || kind > 7) return std::nullopt;
  return ImageRequest{std::string(suffix.substr(0, suffix.size() - 2)), static_cast<ImageKind>(kind)};
}

std::string atime_key(Side side, const Key& key) {
  std::string out(1, k_atime_prefix);
  out += static_cast<char>(side);
  out += key.bytes();
  return out;
}

std::string lru_key(std::uint64_t atime_ms, Side side, const Key& key) {
  std::string out(1, k_lru_prefix);
  for (int i = 7; i >= 0; --i) out += static_cast<char>((atime_ms >> (8 * i)) & 0xff);  // big endian: sorts by time
  out += static_cast<char>(side);
  out += key.bytes();
  return out;
}

std::optional<std::pair<Side, Key>> parse_lru_key(std::string_view k) {
  if (k.size() != 1 + 8 + 1 + k_key_size || k[0] != k_lru_prefix) return std::nullopt;
  auto side = static_cast<std::uint8_t>(k[9]);
  if (side < 1 || side > 2) return std::nullopt;
  return std::pair{static_cast<Side>(side), key_from_bytes(k.substr(10))};
}

Key key_from_bytes(std::string_view bytes) {
  Key key;
  std::memcpy(key.digest.data(), bytes.data(), k_key_size);
  return key;
}

std::uint64_t unix_ms_now() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

Error storage_error(const std::string& what, const rocksdb::Status& status) {
  return make_error(ErrorCode::k_internal, "store: " + what + ": " + status.ToString());
}

}  // namespace kcache::server::records
