#include "image_output.hpp"

#include <cstdio>
#include <filesystem>

namespace kcache::cli {

std::vector<std::string> write_images(const OutputFlags& out, const std::vector<ImageLine>& images,
                                      const std::vector<std::string_view>& data) {
  std::vector<std::string> paths(images.size());
  if (!out.out_file.empty()) {
    if (images.size() != 1) {
      fail(k_exit_usage, "-o writes one image but there are " + std::to_string(images.size()) + "; use --out-dir");
    }
    write_file(out.out_file, data[0]);
    paths[0] = out.out_file;
  } else if (!out.out_dir.empty()) {
    // Names come from the daemon's reply: each must be a plain name, checked before any is written.
    for (const ImageLine& im : images) check_file_name("the daemon's image arch", im.arch);
    make_directories(out.out_dir);
    for (std::size_t i = 0; i < images.size(); ++i) {
      std::filesystem::path p =
          std::filesystem::path(out.out_dir) / (images[i].arch + "." + std::string(kind_extension(images[i].kind)));
      write_file(p, data[i]);
      paths[i] = p.string();
    }
  }
  return paths;
}

void print_images(const std::string& header, const std::vector<ImageLine>& images,
                  const std::vector<std::string>& paths) {
  std::printf("%s\n", header.c_str());
  for (std::size_t i = 0; i < images.size(); ++i) {
    const ImageLine& im = images[i];
    std::printf("  %-8s %-6s %10llu B  sha256 %.16s%s%s%s\n", im.arch.c_str(), std::string(kind_name(im.kind)).c_str(),
                static_cast<unsigned long long>(im.size), im.sha256.c_str(), im.needs_jit ? "  (needs JIT)" : "",
                paths[i].empty() ? "" : "  -> ", paths[i].c_str());
  }
}

void print_stubbed(const std::vector<std::string>& symbols) {
  for (const std::string& s : symbols) std::printf("  stubbed for the host: %s\n", s.c_str());
}

}  // namespace kcache::cli
