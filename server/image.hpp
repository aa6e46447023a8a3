// A compiled image and its metadata, as the compiler produces it and the store keeps it.
#pragma once

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

struct Image {
  ImageMeta meta;
  std::string data;
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
