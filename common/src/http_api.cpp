#include "kcache/http_api.hpp"

#include <cctype>

namespace kcache::http_api {
namespace {

std::string path_part(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.') {
      out += c;
    } else {
      static constexpr char k_hex[] = "0123456789ABCDEF";
      out += '%';
      out += k_hex[static_cast<unsigned char>(c) >> 4];
      out += k_hex[static_cast<unsigned char>(c) & 15];
    }
  }
  return out;
}

}  // namespace

std::string image_path(Side side, std::string_view key, std::string_view arch, ImageKind kind) {
  std::string path(k_image_prefix);
  path.append(side_name(side)).append("/").append(key).append("/").append(arch).append("/").append(kind_name(kind));
  return path;
}

std::string select_path(Side side, std::string_view key, std::string_view arch, std::optional<ImageKind> kind,
                        CudaVersion driver) {
  std::string path(k_select_prefix);
  path.append(side_name(side)).append("/").append(path_part(key)).append("/").append(path_part(arch));
  std::string query;
  if (kind) query.append("&").append(k_kind_param).append("=").append(kind_name(*kind));
  if (driver != 0) query.append("&").append(k_driver_param).append("=").append(std::to_string(driver));
  if (!query.empty()) path.append("?").append(query, 1);
  return path;
}

}  // namespace kcache::http_api
