#include "wire/wire.hpp"

namespace kcache::wire {

Side from_proto(v1::Side side) { return side == v1::SIDE_HOST ? Side::host : Side::device; }

v1::Side to_proto(Side side) { return side == Side::host ? v1::SIDE_HOST : v1::SIDE_DEVICE; }

std::optional<ImageKind> from_proto(v1::ImageKind kind) {
  switch (kind) {
    case v1::KIND_PTX: return ImageKind::ptx;
    case v1::KIND_CUBIN: return ImageKind::cubin;
    case v1::KIND_OBJECT: return ImageKind::object;
    default: return std::nullopt;
  }
}

v1::ImageKind to_proto(ImageKind kind) {
  switch (kind) {
    case ImageKind::ptx: return v1::KIND_PTX;
    case ImageKind::cubin: return v1::KIND_CUBIN;
    case ImageKind::object: return v1::KIND_OBJECT;
  }
  return v1::KIND_UNSPECIFIED;
}

v1::InputFormat to_proto(InputFormat format) {
  switch (format) {
    case InputFormat::llvm_bitcode: return v1::FORMAT_LLVM_BITCODE;
    case InputFormat::llvm_text: return v1::FORMAT_LLVM_TEXT;
    case InputFormat::ptx: return v1::FORMAT_PTX;
  }
  return v1::FORMAT_UNSPECIFIED;
}

Expected<JobSpec> job_spec(const v1::CompileRequest& request, std::string_view host_triple) {
  JobSpec spec;
  spec.side = from_proto(request.side());
  switch (request.format()) {
    case v1::FORMAT_LLVM_BITCODE: spec.format = InputFormat::llvm_bitcode; break;
    case v1::FORMAT_LLVM_TEXT: spec.format = InputFormat::llvm_text; break;
    case v1::FORMAT_PTX: spec.format = InputFormat::ptx; break;
    case v1::FORMAT_UNSPECIFIED: spec.format = infer_format(request.module()); break;
    default:
      return make_error(ErrorCode::k_invalid_argument,
                        "unknown input format " + std::to_string(request.format()) + ": use bitcode, text IR or PTX");
  }
  spec.target = request.target();
  const v1::CompileOptions& o = request.options();
  spec.options.opt_level = o.has_opt_level() ? o.opt_level() : 2;
  spec.options.debug_info = o.debug_info();
  spec.options.lineinfo = o.lineinfo();
  spec.options.fast_math = o.fast_math();
  spec.options.entry_points.assign(o.entry_points().begin(), o.entry_points().end());
  spec.options.cpu = o.cpu();
  spec.options.guard = o.guard() == v1::GUARD_STUB ? HostGuard::stub : HostGuard::reject;
  if (auto ok = canonicalize(spec, host_triple); !ok) return ok.error();
  return spec;
}

Expected<std::vector<ImageRequest>> image_requests(const v1::CompileRequest& request, const JobSpec& spec) {
  std::vector<ImageKind> kinds;
  for (int k : request.emit()) {
    auto kind = from_proto(static_cast<v1::ImageKind>(k));
    if (!kind) {
      return make_error(ErrorCode::k_invalid_argument,
                        "unknown image kind " + std::to_string(k) + " in emit: use PTX, CUBIN or OBJECT");
    }
    kinds.push_back(*kind);
  }
  std::vector<std::string> archs(request.archs().begin(), request.archs().end());
  return plan_images(spec, archs, kinds);
}

void fill_request(const JobSpec& spec, v1::CompileRequest& request) {
  request.set_side(to_proto(spec.side));
  request.set_format(to_proto(spec.format));
  request.set_target(spec.target);
  v1::CompileOptions* o = request.mutable_options();
  o->set_opt_level(spec.options.opt_level);
  o->set_debug_info(spec.options.debug_info);
  o->set_lineinfo(spec.options.lineinfo);
  o->set_fast_math(spec.options.fast_math);
  o->mutable_entry_points()->Assign(spec.options.entry_points.begin(), spec.options.entry_points.end());
  o->set_cpu(spec.options.cpu);
  o->set_guard(spec.options.guard == HostGuard::stub ? v1::GUARD_STUB : v1::GUARD_REJECT);
}

grpc::Status to_status(const Error& error) {
  return grpc::Status(static_cast<grpc::StatusCode>(error.code), error.message);
}

Error from_status(const grpc::Status& status) {
  return Error{static_cast<ErrorCode>(status.error_code()), status.error_message()};
}

double hit_ratio(const v1::Stats& stats) {
  std::uint64_t requests = stats.hits() + stats.misses() + stats.coalesced();
  return requests == 0 ? 0.0 : static_cast<double>(stats.hits()) / static_cast<double>(requests);
}

}  // namespace kcache::wire
