#include "remote/entry.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>

#include "kcache/step.hpp"
#include "store/records.hpp"

namespace kcache::server::remote {
namespace {

constexpr std::string_view k_tag_domain = "kcache-remote-entry-1";
constexpr std::string_view k_record_field = "r";
constexpr std::string_view k_meta_prefix = "m:";
constexpr std::string_view k_image_prefix = "i:";
constexpr std::size_t k_tag_bytes = 32;
constexpr std::size_t k_max_arch_chars = 64;

std::string image_suffix(const ImageRequest& which) { return which.arch + "." + std::string(kind_name(which.kind)); }

// (arch, kind) from "ARCH.KIND" as this file writes it; nullopt for anything else.
std::optional<ImageRequest> parse_image_suffix(std::string_view suffix) {
  std::size_t dot = suffix.rfind('.');
  if (dot == std::string_view::npos || dot == 0) return std::nullopt;
  std::string_view arch = suffix.substr(0, dot);
  // A build step's file is named by its file name (kcache/step.hpp), dots and spaces included.
  if (suffix.substr(dot + 1) == kind_name(ImageKind::file)) {
    if (!is_step_file_name(arch)) return std::nullopt;
    return ImageRequest{std::string(arch), ImageKind::file};
  }
  if (dot > k_max_arch_chars) return std::nullopt;
  bool plain = std::all_of(arch.begin(), arch.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == ':' || c == '+';
  });
  auto kind = parse_kind(suffix.substr(dot + 1));
  if (!plain || !kind) return std::nullopt;
  return ImageRequest{std::string(arch), *kind};
}

// What the tag covers: side, key, fingerprint, arch and the encoded metadata (kind, size,
// digest, kernel resources), each length-prefixed where its length varies.
std::string tagged_message(Side side, const Key& key, const Digest& fingerprint, std::string_view arch,
                           std::string_view meta) {
  std::string m(k_tag_domain);
  m += static_cast<char>(side);
  m += key.bytes();
  m += as_bytes(fingerprint);
  m += static_cast<char>(arch.size() & 0xff);
  m += arch;
  m += meta;
  return m;
}

}  // namespace

Expected<FleetSecret> FleetSecret::read(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    return make_error(ErrorCode::k_failed_precondition,
                      "cannot read the fleet secret " + file.string() + " (--remote-secret-file)");
  }
  std::string bytes(std::istreambuf_iterator<char>(in), {});
  if (bytes.size() > k_max_bytes + 1) {
    return make_error(ErrorCode::k_failed_precondition, "the fleet secret " + file.string() + " is over " +
                                                            std::to_string(k_max_bytes) + " bytes: is it the right file?");
  }
  if (!bytes.empty() && bytes.back() == '\n') bytes.pop_back();
  if (bytes.size() < k_min_bytes || bytes.size() > k_max_bytes) {
    return make_error(ErrorCode::k_failed_precondition,
                      "the fleet secret " + file.string() + " holds " + std::to_string(bytes.size()) +
                          " bytes; it needs at least " + std::to_string(k_min_bytes) +
                          " (e.g. `openssl rand -hex 32 > " + file.string() + "`)");
  }
  return FleetSecret(std::move(bytes));
}

Digest FleetSecret::tag(std::string_view message) const {
  Digest out{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), m_bytes.data(), static_cast<int>(m_bytes.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(), &length);
  return out;
}

std::string entry_key(Side side, const Key& key) {
  return std::string("kcache:{") + (side == Side::device ? "d:" : "h:") + key.hex() + "}";
}

std::string flight_of(Side side, const Key& key, const std::vector<ImageRequest>& images) {
  std::string flight = std::string(side_name(side)) + "/" + key.hex();
  for (const ImageRequest& r : images) flight += "/" + image_suffix(r);
  return flight;
}

std::string lease_key(Side side, const Key& key, std::string_view flight) {
  return entry_key(side, key) + ":lease:" + sha256_hex(flight).substr(0, 32);
}

std::vector<Field> encode_fields(const FleetSecret& secret, Side side, const Key& key, const Digest& fingerprint,
                                 const EntryRecord& record, std::span<const Image> images) {
  std::vector<Field> fields;
  fields.emplace_back(std::string(k_record_field), records::encode_entry(side, record));
  for (const Image& image : images) {
    std::string suffix = image_suffix(image.meta.id());
    std::string meta = records::encode_meta(image.meta);
    Digest tag = secret.tag(tagged_message(side, key, fingerprint, image.meta.arch, meta));
    fields.emplace_back(std::string(k_meta_prefix) + suffix, meta + std::string(as_bytes(tag)));
    fields.emplace_back(std::string(k_image_prefix) + suffix, image.data);
  }
  return fields;
}

DecodedEntry decode_fields(const FleetSecret& secret, Side side, const Key& key, const Digest& fingerprint,
                           std::vector<std::string> flat) {
  DecodedEntry out;
  std::optional<EntryRecord> record;
  std::map<std::string, std::string_view> metas;  // by "ARCH.KIND"
  std::map<std::string, std::size_t> datas;        // by "ARCH.KIND": the index of its bytes in `flat`
  for (std::size_t i = 0; i + 1 < flat.size(); i += 2) {
    std::string_view name = flat[i], value = flat[i + 1];
    if (name == k_record_field) {
      auto decoded = records::decode_entry(value);
      if (decoded && decoded->side == side) record = decoded->record;
      else out.rejected.push_back("the entry record does not decode for the " + std::string(side_name(side)) + " side");
    } else if (name.starts_with(k_meta_prefix)) {
      metas[std::string(name.substr(k_meta_prefix.size()))] = value;
    } else if (name.starts_with(k_image_prefix)) {
      datas[std::string(name.substr(k_image_prefix.size()))] = i + 1;
    } else {
      out.rejected.push_back("a field no daemon writes: '" + std::string(name.substr(0, 64)) + "'");
    }
  }
  if (flat.size() % 2 != 0) out.rejected.push_back("an odd number of hash elements");
  for (const auto& [suffix, meta_and_tag] : metas) {
    auto id = parse_image_suffix(suffix);
    auto data = datas.find(suffix);
    std::string name = suffix.substr(0, k_max_arch_chars + 8);
    if (!id) {
      out.rejected.push_back("image field '" + name + "' names no arch and kind");
      continue;
    }
    if (data == datas.end()) {
      out.partial = true;  // its bytes are gone (or not yet there): a miss, not an attack
      continue;
    }
    if (meta_and_tag.size() <= k_tag_bytes) {
      out.rejected.push_back(name + ": metadata too short for its tag");
      continue;
    }
    std::string_view meta = meta_and_tag.substr(0, meta_and_tag.size() - k_tag_bytes);
    std::string_view tag = meta_and_tag.substr(meta.size());
    Digest expected = secret.tag(tagged_message(side, key, fingerprint, id->arch, meta));
    if (CRYPTO_memcmp(expected.data(), tag.data(), k_tag_bytes) != 0) {
      out.rejected.push_back(name + ": no valid fleet HMAC (written by someone without the secret, or for another key)");
      continue;
    }
    auto decoded = records::decode_meta(meta, id->arch);
    if (!decoded || decoded->kind != id->kind || !image_belongs_to(side, decoded->kind, decoded->arch)) {
      out.rejected.push_back(name + ": signed metadata that does not decode as this image's");
      continue;
    }
    std::string& bytes = flat[data->second];
    if (decoded->size != bytes.size() || sha256(bytes) != decoded->sha256) {
      out.rejected.push_back(name + ": bytes that do not match the signed size and digest");
      continue;
    }
    out.images.push_back(Image{std::move(*decoded), std::move(bytes)});  // each suffix's bytes once
  }
  for (const auto& [suffix, data] : datas) {
    if (!metas.contains(suffix)) out.partial = true;
  }
  if (!record) {
    out.partial = true;
    out.images.clear();
  } else {
    out.record = *record;
  }
  return out;
}

}  // namespace kcache::server::remote
