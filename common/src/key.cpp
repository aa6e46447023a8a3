#include "kcache/key.hpp"

#include <array>

namespace kcache {
namespace {

// Tags of the key encoding; KEY_FORMAT.md lists them. Never reuse or renumber a tag.
enum Tag : std::uint8_t {
  k_tag_version = 1,
  k_tag_fingerprint = 2,
  k_tag_side = 3,
  k_tag_format = 4,
  k_tag_target = 5,
  k_tag_cpu = 6,
  k_tag_opt_level = 7,
  k_tag_flags = 8,
  k_tag_entry_point = 9,
  k_tag_module = 10,
  k_tag_linked_module = 11,
  k_tag_ptx_isa_cap = 12,
  k_tag_header = 13,
  k_tag_nvrtc_option = 14,
  k_tag_name_expression = 15,
  k_tag_amd_code_object_cap = 16,
};

void hash_field(Sha256& h, Tag tag, std::string_view value) { hash_tagged_field(h, tag, value); }

void hash_byte(Sha256& h, Tag tag, std::uint8_t value) {
  char c = static_cast<char>(value);
  hash_field(h, tag, {&c, 1});
}

}  // namespace

void hash_tagged_field(Sha256& h, std::uint8_t tag, std::string_view value) {
  std::array<char, 9> head{};
  head[0] = static_cast<char>(tag);
  std::uint64_t len = value.size();
  for (int i = 0; i < 8; ++i) head[1 + i] = static_cast<char>((len >> (8 * i)) & 0xff);
  h.update({head.data(), head.size()});
  h.update(value);
}

Expected<Key> parse_key(std::string_view hex) {
  auto digest = digest_from_hex(hex);
  if (!digest) {
    return make_error(ErrorCode::k_invalid_argument,
                      "'" + std::string(hex.substr(0, 80)) + "' is not a key: expected 64 hex digits");
  }
  return Key{*digest};
}

Key compute_key(const JobSpec& spec, std::string_view module, const Digest& fingerprint) {
  return compute_key(spec, std::span<const std::string_view>(&module, 1), fingerprint);
}

Key compute_key(const JobSpec& spec, std::span<const std::string_view> modules, const Digest& fingerprint) {
  Sha256 h;
  h.update("kcache-key");
  std::array<char, 4> version{};
  for (int i = 0; i < 4; ++i) version[i] = static_cast<char>((k_key_format_version >> (8 * i)) & 0xff);
  hash_field(h, k_tag_version, {version.data(), version.size()});
  hash_field(h, k_tag_fingerprint, as_bytes(fingerprint));
  hash_byte(h, k_tag_side, static_cast<std::uint8_t>(spec.side));
  hash_byte(h, k_tag_format, static_cast<std::uint8_t>(spec.format));
  hash_field(h, k_tag_target, spec.target);
  hash_field(h, k_tag_cpu, spec.options.cpu);
  hash_byte(h, k_tag_opt_level, static_cast<std::uint8_t>(spec.options.opt_level));
  std::uint8_t flags = (spec.options.debug_info ? 1 : 0) | (spec.options.lineinfo ? 2 : 0) |
                       (spec.options.fast_math ? 4 : 0) |
                       (spec.options.guard == HostGuard::stub ? 8 : 0);
  hash_byte(h, k_tag_flags, flags);
  for (const std::string& name : spec.options.entry_points) hash_field(h, k_tag_entry_point, name);
  hash_field(h, k_tag_module, as_bytes(sha256(modules.empty() ? std::string_view() : modules[0])));
  // Linked modules in order, each with its format: a one-module job encodes exactly as before.
  for (std::size_t i = 1; i < modules.size(); ++i) {
    InputFormat format = i - 1 < spec.linked_formats.size() ? spec.linked_formats[i - 1] : InputFormat::llvm_text;
    std::string value(1, static_cast<char>(format));
    value += as_bytes(sha256(modules[i]));
    hash_field(h, k_tag_linked_module, value);
  }
  // Only a driver that cannot take the daemon's PTX makes a key of its own: a job stating none,
  // or a new enough one, encodes exactly as before.
  if (spec.ptx_isa_cap != 0) hash_byte(h, k_tag_ptx_isa_cap, static_cast<std::uint8_t>(spec.ptx_isa_cap));
  // Likewise a runtime that loads only older AMD code objects.
  if (spec.amd_code_object_cap != 0) {
    hash_byte(h, k_tag_amd_code_object_cap, static_cast<std::uint8_t>(spec.amd_code_object_cap));
  }
  // A CUDA C++ job's headers (name, then its digest: the digest's fixed length keeps this
  // injective), NVRTC options and name expressions, each in canonical order. Other jobs have none.
  for (const SourceHeader& header : spec.source.headers) {
    hash_field(h, k_tag_header, header.name + std::string(as_bytes(header.digest)));
  }
  for (const std::string& option : spec.source.nvrtc_options) hash_field(h, k_tag_nvrtc_option, option);
  for (const std::string& name : spec.source.name_expressions) hash_field(h, k_tag_name_expression, name);
  return Key{h.finish()};
}

}  // namespace kcache
