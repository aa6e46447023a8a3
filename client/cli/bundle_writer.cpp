#include "bundle_writer.hpp"

#include "cli_common.hpp"
#include "wire/wire.hpp"

namespace kcache::cli {

BundleWriter::BundleWriter(std::filesystem::path dir) : m_dir(std::move(dir)) { make_directories(m_dir / "images"); }

BundleEntry BundleWriter::write_images(const std::string& module, Side side, const v1::CompileResponse& response) const {
  BundleEntry entry;
  entry.module = module;
  entry.key = response.key();
  entry.side = side;
  check_file_name("the daemon's key", entry.key);
  for (const v1::Image& im : response.images()) check_file_name("the daemon's image arch", im.arch());
  for (const v1::Image& im : response.images()) {
    auto kind = wire::from_proto(im.kind());
    if (!kind) fail(k_exit_error, "the daemon sent an image of unknown kind " + std::to_string(im.kind()));
    std::string file = "images/" + entry.key + "." + im.arch() + "." + std::string(kind_extension(*kind));
    write_file(m_dir / file, im.data());
    BundleImage image{{im.arch(), *kind}, im.size(), im.sha256(), file, {}, {}};
    for (const v1::KernelInfo& k : im.kernels()) image.kernels.push_back(k.name());
    for (const v1::LoweredName& n : im.lowered_names()) image.lowered_names.emplace_back(n.expression(), n.lowered());
    entry.images.push_back(std::move(image));
  }
  return entry;
}

void BundleWriter::write_index(const BundleIndex& index) const {
  if (auto written = write_bundle_index(m_dir, index); !written) fail(written.error());
}

}  // namespace kcache::cli
