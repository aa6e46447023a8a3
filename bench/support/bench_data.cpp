#include "bench_data.hpp"

#include <array>
#include <cstdio>
#include <stdexcept>

#include "kcache/job.hpp"
#include "kcache/sha256.hpp"

namespace kcache::bench {
namespace {

// splitmix64: a cheap, well-mixed generator; image bytes must be fast to make by the million.
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t below(std::uint64_t n) { return next() % n; }
};

Key named_key(const std::string& name) { return Key{sha256("kcache-bench/" + name)}; }

}  // namespace

Key hit_key(std::size_t size, std::uint64_t index) {
  return named_key("hit/" + std::to_string(size) + "/" + std::to_string(index));
}

Key scale_key(std::uint64_t index) { return named_key("scale/" + std::to_string(index)); }

std::size_t scale_size(std::uint64_t index) {
  Rng rng{index * 7919 + 1};
  return 1024 + rng.below(3 * 1024 + 1);
}

std::string ptx_like(std::size_t size, std::uint64_t seed) {
  static constexpr std::array<const char*, 8> k_ops = {
      "ld.global.f32 \t%%f%u, [%%rd%u+%u];\n", "st.global.f32 \t[%%rd%u+%u], %%f%u;\n",
      "fma.rn.f32 \t%%f%u, %%f%u, %%f%u, 0f%08X;\n", "mul.wide.s32 \t%%rd%u, %%r%u, %u;\n",
      "add.s64 \t%%rd%u, %%rd%u, %%rd%u;\n", "setp.ge.s32 \t%%p%u, %%r%u, %u;\n",
      "mov.u32 \t%%r%u, %%tid.x; // %u\n", "@%%p%u bra \t$L__BB%u_%u;\n"};
  Rng rng{seed};
  std::string out;
  out.reserve(size + 64);
  char line[128];
  std::string id = std::to_string(seed);
  out += "//\n// kcache benchmark image " + id + "\n//\n\n.version 8.0\n.target sm_90\n.address_size 64\n\n";
  out += ".visible .entry bench_" + id + "(\n\t.param .u64 bench_param_0\n)\n{\n";
  while (out.size() < size) {
    std::uint64_t r = rng.next();
    auto a = static_cast<unsigned>(r & 0xff), b = static_cast<unsigned>((r >> 8) & 0xff);
    auto c = static_cast<unsigned>((r >> 16) & 0xfff);
    out += '\t';
    std::snprintf(line, sizeof line, k_ops[(r >> 40) & 7], a, b, c, static_cast<unsigned>(r >> 32));
    out += line;
  }
  out.resize(size);
  if (size >= 2) out.replace(size - 2, 2, "}\n");
  return out;
}

std::vector<std::size_t> parse_size_list(std::string_view text) {
  std::vector<std::size_t> out;
  while (!text.empty()) {
    std::size_t comma = text.find(',');
    std::string_view item = text.substr(0, comma);
    auto size = parse_size(item);
    if (!size) throw std::invalid_argument("not a size: " + std::string(item));
    out.push_back(*size);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return out;
}

std::vector<int> parse_int_list(std::string_view text) {
  std::vector<int> out;
  for (std::size_t s : parse_size_list(text)) out.push_back(static_cast<int>(s));
  return out;
}

std::string size_label(std::size_t size) {
  if (size >= (1u << 20) && size % (1u << 20) == 0) return std::to_string(size >> 20) + " MiB";
  if (size >= 1024 && size % 1024 == 0) return std::to_string(size >> 10) + " KiB";
  return std::to_string(size) + " B";
}

}  // namespace kcache::bench
