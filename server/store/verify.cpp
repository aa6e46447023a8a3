// Store::verify: walks every record of both sides and checks each entry as a whole, the way a
// read would (decoding, payload present, SHA-256, host image check), plus the usage counters.
// `kcached --verify` runs it on a stopped daemon's database.
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <functional>
#include <map>

#include "kcache/step.hpp"
#include "store/records.hpp"
#include "store/store_impl.hpp"

namespace kcache::server {

using namespace records;

namespace {

// The records of one key: its entry and image metadata from a walk, its payloads by point reads.
struct Gathered {
  std::string key_bytes;
  std::optional<std::string> entry;
  std::map<std::string, std::string> metas;     // image suffix (arch 0 kind) -> meta value
  std::map<std::string, std::string> payloads;  // image suffix -> payload
  std::map<std::string, std::string> unreadable_payloads;  // image suffix -> RocksDB's error
  std::optional<std::string> unreadable;        // RocksDB's error reading the entry's records
  std::vector<std::string> strays;              // records with an unknown tag
};

}  // namespace

Expected<VerifyReport> Store::Impl::verify(bool repair) {
  if (auto flushed = flush_access_times(); !flushed) return flushed.error();
  // A repair holds the writers' lock throughout (compiles wait to store; hits go on), so what it
  // removes and recounts is the live state. A check reads one snapshot, counters included.
  std::unique_lock<std::mutex> writers;
  if (repair) writers = std::unique_lock(m_write_mutex);
  const rocksdb::Snapshot* snapshot = m_db->GetSnapshot();
  std::unique_ptr<const rocksdb::Snapshot, std::function<void(const rocksdb::Snapshot*)>> release(
      snapshot, [this](const rocksdb::Snapshot* s) { m_db->ReleaseSnapshot(s); });
  VerifyReport report;
  std::vector<std::pair<Side, Key>> bad;

  auto check = [&](Side side, const Gathered& g) {
    Key key = key_from_bytes(g.key_bytes);
    auto problem = [&](std::string what) {
      report.problems.push_back({side, key.hex(), std::move(what)});
      bad.emplace_back(side, key);
    };
    if (g.unreadable) return problem("unreadable records: " + *g.unreadable);
    if (!g.entry) return problem("images without an entry record");
    auto entry = decode_entry(*g.entry);
    if (!entry) return problem("an undecodable entry record");
    if (entry->side != side) return problem("an entry record of the other side");
    if (!g.strays.empty()) return problem("a record with an unknown tag");
    std::uint64_t images = 0, bytes = 0;
    for (const auto& [suffix, value] : g.metas) {
      auto id = decode_image_suffix(suffix);
      if (!id) return problem("an image record with a malformed key");
      std::string name = id->arch + "." + std::string(kind_name(id->kind));
      auto meta = decode_meta(value, id->arch);
      if (!meta || meta->kind != id->kind) return problem("image " + name + ": undecodable metadata");
      if (!image_belongs_to(side, meta->kind, meta->arch)) return problem("image " + name + ": a kind of the other side");
      if (auto bad = g.unreadable_payloads.find(suffix); bad != g.unreadable_payloads.end()) {
        return problem("image " + name + ": unreadable payload: " + bad->second);
      }
      auto payload = g.payloads.find(suffix);
      if (payload == g.payloads.end()) return problem("image " + name + ": no payload");
      if (payload->second.size() != meta->size || sha256(payload->second) != meta->sha256) {
        return problem("image " + name + ": the payload does not match its SHA-256");
      }
      if (side == Side::host) {
        if (!m_host_image_check) return problem("image " + name + ": no host image check to run");
        if (auto ok = m_host_image_check(payload->second); !ok) return problem("image " + name + ": " + ok.error().message);
      }
      ++images;
      bytes += meta->size;
    }
    ++report.entries;
    report.images += images;
    report.bytes += bytes;
    std::string atime;
    if (!m_db->Get(rocksdb::ReadOptions(), m_meta, atime_key(side, key), &atime).ok()) {
      ++report.access_times_added;
      if (repair) {
        std::uint64_t when = entry->record.created_unix * 1000;
        rocksdb::WriteBatch batch;
        batch.Put(m_meta, atime_key(side, key), encode_u64(when));
        batch.Put(m_meta, lru_key(when, side, key), "");
        m_db->Write(rocksdb::WriteOptions(), &batch);
      }
    }
  };

  rocksdb::ReadOptions ro;
  ro.snapshot = snapshot;
  ro.fill_cache = false;       // one pass over everything: keep the block cache for serving
  ro.total_order_seek = true;  // across keys: the families' prefix bloom filters hold within one key only
  for (Side side : {Side::device, Side::host}) {
    rocksdb::ColumnFamilyHandle* cf = family(side);
    // Payloads are read one by one (Get), never walked: an iterator that lands on a corrupt blob
    // stops for good, and every entry after it would go unchecked.
    std::unique_ptr<rocksdb::Iterator> keys(m_db->NewIterator(ro, cf));
    for (keys->SeekToFirst(); keys->Valid();) {
      std::string_view k = keys->key().ToStringView();
      Gathered g;
      if (k.size() <= k_key_size) {
        g.key_bytes = std::string(k.size() < k_key_size ? std::string(k_key_size, '\0') : std::string(k));
        g.strays.emplace_back(k);
        check(side, g);
        keys->Next();
        continue;
      }
      g.key_bytes = std::string(k.substr(0, k_key_size));
      std::string lower = g.key_bytes, upper = g.key_bytes + static_cast<char>(k_meta_tag + 1);
      rocksdb::Slice upper_slice(upper);
      rocksdb::ReadOptions bounded = ro;
      bounded.iterate_upper_bound = &upper_slice;
      std::unique_ptr<rocksdb::Iterator> records(m_db->NewIterator(bounded, cf));
      for (records->Seek(lower); records->Valid(); records->Next()) {
        std::string_view rk = records->key().ToStringView();
        std::string suffix(rk.substr(std::min(rk.size(), k_key_size + 1)));
        if (rk.size() > k_key_size && rk[k_key_size] == k_entry_tag && suffix.empty()) {
          g.entry = records->value().ToString();
        } else if (rk.size() > k_key_size && rk[k_key_size] == k_meta_tag) {
          g.metas[suffix] = records->value().ToString();
        } else {
          g.strays.emplace_back(rk);
        }
      }
      if (!records->status().ok()) g.unreadable = records->status().ToString();
      for (const auto& [suffix, meta] : g.metas) {
        std::string payload;
        rocksdb::Status s = m_db->Get(ro, cf, g.key_bytes + k_payload_tag + suffix, &payload);
        if (s.ok()) g.payloads[suffix] = std::move(payload);
        else if (!s.IsNotFound()) g.unreadable_payloads[suffix] = s.ToString();
      }
      check(side, g);
      // On to the next key: the first record after every record of this one.
      keys->Seek(g.key_bytes + static_cast<char>(0xff) + std::string(8, static_cast<char>(0xff)));
    }
    if (!keys->status().ok()) {
      report.problems.push_back({side, "", "RocksDB cannot read on: " + keys->status().ToString() +
                                               " (serving removes such entries as they are read)"});
    }
  }

  // With bad entries the counters cannot be compared (what a bad entry held is unknown); a
  // repair recounts them.
  auto counter = [&](std::string_view name) {
    std::string value;
    return m_db->Get(ro, m_meta, name, &value).ok() ? decode_u64(value) : 0;
  };
  report.counters_wrong = bad.empty() && (report.entries != counter(k_entries_key) ||
                                          report.images != counter(k_images_key) ||
                                          report.bytes != counter(k_bytes_key));
  if (!repair) return report;
  for (const auto& [side, key] : bad) {
    if (auto removed = remove_entry_locked(side, key); removed) ++report.removed;
  }
  if (m_entries != report.entries || m_images != report.images || m_bytes != report.bytes) {
    report.counters_wrong = true;
    rocksdb::WriteBatch batch;
    batch.Put(m_meta, k_entries_key, encode_u64(report.entries));
    batch.Put(m_meta, k_images_key, encode_u64(report.images));
    batch.Put(m_meta, k_bytes_key, encode_u64(report.bytes));
    rocksdb::Status s = m_db->Write(rocksdb::WriteOptions(), &batch);
    if (!s.ok()) return storage_error("rewriting the usage counters", s);
    m_entries = report.entries;
    m_images = report.images;
    m_bytes = report.bytes;
  }
  return report;
}

}  // namespace kcache::server
