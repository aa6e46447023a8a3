#include "store/store.hpp"

#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/options.h>
#include <rocksdb/slice_transform.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>

namespace kcache::server {
namespace {

constexpr std::string_view k_format_key = "format";
constexpr std::string_view k_format_value = "kcache-store-1";
constexpr std::string_view k_entries_key = "usage.entries";
constexpr std::string_view k_images_key = "usage.images";
constexpr std::string_view k_bytes_key = "usage.bytes";
constexpr std::string_view k_entry_magic = "KCE1";
constexpr std::string_view k_meta_magic = "KCM1";
constexpr std::size_t k_key_size = 32;

// Record suffixes after the 32 key bytes (FORMAT.md).
constexpr char k_entry_tag = 'E';
constexpr char k_meta_tag = 'M';
constexpr char k_payload_tag = 'P';

std::string entry_key(const Key& key) { return std::string(key.bytes()) + k_entry_tag; }

std::string image_key(const Key& key, char tag, const ImageRequest& which) {
  std::string out(key.bytes());
  out += tag;
  out += which.arch;
  out += '\0';
  out += static_cast<char>(which.kind);
  return out;
}

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
  w.bytes(k_meta_magic);
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
  }
  w.uint<std::uint16_t>(static_cast<std::uint16_t>(m.stubbed.size()));
  for (const std::string& s : m.stubbed) w.str16(s);
  return w.take();
}

// Decodes an image meta record; `arch` comes from the record's key.
std::optional<ImageMeta> decode_meta(std::string_view value, std::string arch) {
  Reader r(value);
  ImageMeta m;
  m.arch = std::move(arch);
  std::string_view magic, digest;
  std::uint8_t kind = 0;
  std::uint16_t kernels = 0;
  if (!r.bytes(4, magic) || magic != k_meta_magic || !r.uint(kind) || !r.uint(m.size) || !r.bytes(32, digest) ||
      !r.uint(kernels)) {
    return std::nullopt;
  }
  if (kind < 1 || kind > 3) return std::nullopt;
  m.kind = static_cast<ImageKind>(kind);
  std::memcpy(m.sha256.data(), digest.data(), 32);
  for (std::uint16_t i = 0; i < kernels; ++i) {
    KernelInfo k;
    if (!r.str16(k.name) || !r.uint(k.registers) || !r.uint(k.shared_bytes) || !r.uint(k.local_bytes) ||
        !r.uint(k.spill_stores) || !r.uint(k.spill_loads)) {
      return std::nullopt;
    }
    m.kernels.push_back(std::move(k));
  }
  std::uint16_t stubbed = 0;
  if (!r.uint(stubbed)) return std::nullopt;
  for (std::uint16_t i = 0; i < stubbed; ++i) {
    if (!r.str16(m.stubbed.emplace_back())) return std::nullopt;
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

Error storage_error(const std::string& what, const rocksdb::Status& s) {
  return make_error(ErrorCode::k_internal, "store: " + what + ": " + s.ToString());
}

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

Expected<std::unique_ptr<Store>> Store::open(const StoreOptions& options) {
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
  std::unique_ptr<Store> store(new Store());
  store->m_host_image_check = options.host_image_check;
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
  return store;
}

Store::~Store() {
  if (!m_db) return;
  for (rocksdb::ColumnFamilyHandle* h : m_handles) m_db->DestroyColumnFamilyHandle(h);
  m_db->Close();
}

rocksdb::ColumnFamilyHandle* Store::family(Side side) const { return side == Side::host ? m_host : m_device; }

Expected<void> Store::put(Side side, const Key& key, const EntryRecord& record, std::span<const Image> images) {
  for (const Image& image : images) {
    auto refuse = [&](const std::string& why) {
      std::string message = "store: refusing " + std::string(side_name(side)) + " entry " + key.hex() + ", image " +
                            image.meta.arch + "." + std::string(kind_name(image.meta.kind)) + ": " + why;
      spdlog::error("{}", message);
      return make_error(ErrorCode::k_internal, message);
    };
    if (image.meta.size != image.data.size() || sha256(image.data) != image.meta.sha256) {
      return refuse("it does not match its digest");
    }
    if (kind_side(image.meta.kind) != side) return refuse("the image kind belongs to the other side");
    if (side != Side::host) continue;
    if (!m_host_image_check) return refuse("no host image check is configured");
    if (auto checked = m_host_image_check(image.data); !checked) return refuse(checked.error().message);
  }
  std::lock_guard lock(m_write_mutex);
  rocksdb::ColumnFamilyHandle* cf = family(side);
  rocksdb::WriteBatch batch;
  std::uint64_t entries = m_entries, count = m_images, bytes = m_bytes;

  std::string existing;
  rocksdb::Status s = m_db->Get(rocksdb::ReadOptions(), cf, entry_key(key), &existing);
  if (s.IsNotFound()) ++entries;
  else if (!s.ok()) return storage_error("reading entry", s);
  batch.Put(cf, entry_key(key), encode_entry(side, record));

  for (const Image& image : images) {
    std::string meta_key = image_key(key, k_meta_tag, image.meta.id());
    s = m_db->Get(rocksdb::ReadOptions(), cf, meta_key, &existing);
    if (s.ok()) {
      auto old = decode_meta(existing, image.meta.arch);
      if (old) {
        bytes -= std::min(bytes, old->size);
        if (count > 0) --count;
      }
    } else if (!s.IsNotFound()) {
      return storage_error("reading image metadata", s);
    }
    batch.Put(cf, meta_key, encode_meta(image.meta));
    batch.Put(cf, image_key(key, k_payload_tag, image.meta.id()), image.data);
    bytes += image.meta.size;
    ++count;
  }
  batch.Put(m_meta, k_entries_key, encode_u64(entries));
  batch.Put(m_meta, k_images_key, encode_u64(count));
  batch.Put(m_meta, k_bytes_key, encode_u64(bytes));
  s = m_db->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) return storage_error("writing entry", s);
  m_entries = entries;
  m_images = count;
  m_bytes = bytes;
  return {};
}

Expected<std::vector<ImageMeta>> Store::list(Side side, const Key& key) {
  std::string lower = std::string(key.bytes()) + k_meta_tag;
  std::string upper = std::string(key.bytes()) + static_cast<char>(k_meta_tag + 1);
  rocksdb::Slice upper_slice(upper);
  rocksdb::ReadOptions ro;
  ro.iterate_upper_bound = &upper_slice;
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
  if (!it->status().ok()) return storage_error("listing images", it->status());
  return out;
}

Expected<Image> Store::get(Side side, const Key& key, const ImageRequest& which) {
  auto not_found = [&] {
    return make_error(ErrorCode::k_not_found, "no " + std::string(kind_name(which.kind)) + " image for " + which.arch +
                                                  " under key " + key.hex());
  };
  rocksdb::ColumnFamilyHandle* cf = family(side);
  std::string meta_value;
  Image image;
  rocksdb::Status s = m_db->Get(rocksdb::ReadOptions(), cf, image_key(key, k_meta_tag, which), &meta_value);
  if (s.IsNotFound()) return not_found();
  if (s.ok()) s = m_db->Get(rocksdb::ReadOptions(), cf, image_key(key, k_payload_tag, which), &image.data);
  if (s.IsCorruption() || s.IsNotFound()) {
    drop_corrupt_entry(side, key, s.ToString());
    return not_found();
  }
  if (!s.ok()) return storage_error("reading image", s);
  auto meta = decode_meta(meta_value, which.arch);
  if (!meta || meta->kind != which.kind || meta->size != image.data.size() || sha256(image.data) != meta->sha256) {
    drop_corrupt_entry(side, key, "image " + which.arch + "." + std::string(kind_name(which.kind)) +
                                      " does not match its SHA-256 digest");
    return not_found();
  }
  image.meta = std::move(*meta);
  return image;
}

void Store::drop_corrupt_entry(Side side, const Key& key, const std::string& why) {
  spdlog::error("store: {} entry {} is corrupt ({}); removing it, the next compile rebuilds it", side_name(side),
                key.hex(), why);
  std::lock_guard lock(m_write_mutex);
  auto removed = remove_entry_locked(side, key);
  if (!removed) spdlog::error("store: removing corrupt entry {} failed: {}", key.hex(), removed.error().message);
  ++m_corrupt;
}

Expected<void> Store::remove_entry_locked(Side side, const Key& key) {
  rocksdb::ColumnFamilyHandle* cf = family(side);
  std::string lower(key.bytes());
  std::string upper = lower + static_cast<char>(0xff);
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
    }
    batch.Delete(cf, it->key());
  }
  if (had_entry && entries > 0) --entries;
  batch.Put(m_meta, k_entries_key, encode_u64(entries));
  batch.Put(m_meta, k_images_key, encode_u64(count));
  batch.Put(m_meta, k_bytes_key, encode_u64(bytes));
  rocksdb::Status s = m_db->Write(rocksdb::WriteOptions(), &batch);
  if (!s.ok()) return storage_error("removing entry", s);
  m_entries = entries;
  m_images = count;
  m_bytes = bytes;
  return {};
}

StoreStats Store::stats() const { return {m_entries, m_images, m_bytes, m_corrupt}; }

Expected<void> Store::flush() {
  rocksdb::Status s = m_db->Flush(rocksdb::FlushOptions(), m_handles);
  if (!s.ok()) return storage_error("flushing", s);
  return {};
}

}  // namespace kcache::server
