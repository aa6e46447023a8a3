#include "image_proto.hpp"

#include "wire/wire.hpp"

namespace kcache::server {

void to_proto(const ImageMeta& meta, v1::Image& out) {
  out.set_kind(wire::to_proto(meta.kind));
  out.set_arch(meta.arch);
  out.set_size(meta.size);
  out.set_sha256(to_hex(meta.sha256));
  for (const KernelInfo& k : meta.kernels) {
    v1::KernelInfo* info = out.add_kernels();
    info->set_name(k.name);
    info->set_registers(k.registers);
    info->set_shared_bytes(k.shared_bytes);
    info->set_local_bytes(k.local_bytes);
    info->set_spill_stores(k.spill_stores);
    info->set_spill_loads(k.spill_loads);
    info->set_sgprs(k.sgprs);
  }
  for (const std::string& s : meta.stubbed) out.add_stubbed(s);
  for (const auto& [expression, lowered] : meta.lowered_names) {
    v1::LoweredName* n = out.add_lowered_names();
    n->set_expression(expression);
    n->set_lowered(lowered);
  }
}

Expected<Image> image_from_proto(v1::Image&& proto) {
  std::optional<ImageKind> kind = wire::from_proto(proto.kind());
  if (!kind) return make_error(ErrorCode::k_internal, "an image without a kind");
  Image image;
  image.data = std::move(*proto.mutable_data());
  image.meta.kind = *kind;
  image.meta.arch = proto.arch();
  image.meta.size = image.data.size();
  image.meta.sha256 = sha256(image.data);
  if (proto.size() != image.meta.size || proto.sha256() != to_hex(image.meta.sha256)) {
    return make_error(ErrorCode::k_internal, "image " + proto.arch() + " does not match its size and digest");
  }
  for (const v1::KernelInfo& k : proto.kernels()) {
    image.meta.kernels.push_back(
        {k.name(), k.registers(), k.shared_bytes(), k.local_bytes(), k.spill_stores(), k.spill_loads(), k.sgprs()});
  }
  image.meta.stubbed.assign(proto.stubbed().begin(), proto.stubbed().end());
  for (const v1::LoweredName& n : proto.lowered_names()) image.meta.lowered_names.emplace_back(n.expression(), n.lowered());
  return image;
}

}  // namespace kcache::server
