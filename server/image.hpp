// A compiled image and its metadata, as the compiler produces it and the store keeps it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "kcache/job.hpp"
#include "kcache/sha256.hpp"

namespace kcache::server {

struct KernelInfo {
  std::string name;
  std::uint32_t registers = 0;
  std::uint64_t shared_bytes = 0;
  std::uint64_t local_bytes = 0;
  std::uint32_t spill_stores = 0;
  std::uint32_t spill_loads = 0;
  std::uint32_t sgprs = 0;  // AMD: scalar registers per wave (registers holds the vector ones)
  bool operator==(const KernelInfo&) const = default;
};

struct ImageMeta {
  ImageKind kind = ImageKind::ptx;
  std::string arch;
  std::uint64_t size = 0;
  Digest sha256{};
  std::vector<KernelInfo> kernels;
  std::vector<std::string> stubbed;  // host: what the guard replaced with stubs
  // CUDA C++ jobs: (name expression, lowered name) for each of the job's name expressions.
  std::vector<std::pair<std::string, std::string>> lowered_names;
  ImageRequest id() const { return {arch, kind}; }
};

// A value derived from an image's bytes, computed by the first reader that needs it and kept
// for the next: an image in memory (the hot cache's, a pending write's) is shared and never
// changed. A copy starts empty, since its bytes may then change; so does a moved-to image.
class DerivedOnce {
 public:
  DerivedOnce() = default;
  DerivedOnce(const DerivedOnce&) {}
  DerivedOnce& operator=(const DerivedOnce&) { return reset(), *this; }

  template <class Compute>
  std::uint64_t get(Compute&& compute) const {
    if (m_known.load(std::memory_order_acquire)) return m_value.load(std::memory_order_relaxed);
    std::uint64_t value = compute();  // two readers at once both compute it, and agree
    m_value.store(value, std::memory_order_relaxed);
    m_known.store(true, std::memory_order_release);
    return value;
  }

 private:
  void reset() { m_known.store(false, std::memory_order_relaxed); }
  mutable std::atomic<std::uint64_t> m_value{0};
  mutable std::atomic<bool> m_known{false};
};

struct Image {
  ImageMeta meta;
  std::string data;
  // kcache/checksum.hpp's transfer checksum of `data`, for answers that carry it.
  DerivedOnce transfer_checksum{};
};

// An image for `which` holding `data`, with size and digest filled in.
inline Image make_image(const ImageRequest& which, std::string data, std::vector<KernelInfo> kernels = {}) {
  Image image;
  image.meta.kind = which.kind;
  image.meta.arch = which.arch;
  image.meta.size = data.size();
  image.meta.sha256 = sha256(data);
  image.meta.kernels = std::move(kernels);
  image.data = std::move(data);
  return image;
}

}  // namespace kcache::server
