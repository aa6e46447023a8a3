#include "wire/wire.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include "kcache/driver.hpp"

namespace kcache::wire {

namespace {

// INVALID_ARGUMENT for `value` in `field`, which `type` does not define; the values it does are
// read from the descriptor, so the list never goes stale.
Error undefined_enum(const google::protobuf::EnumDescriptor* type, std::string_view field, int value) {
  std::string names;
  for (int i = 0; i < type->value_count(); ++i) {
    names += (i == 0 ? "" : i + 1 == type->value_count() ? " or " : ", ") + type->value(i)->name();
  }
  return make_error(ErrorCode::k_invalid_argument, std::string(field) + " is " + std::to_string(value) + ", which " +
                                                       type->full_name() + " does not define: use " + names);
}

}  // namespace

Expected<Side> from_proto(v1::Side side, std::string_view field) {
  switch (side) {
    case v1::SIDE_UNSPECIFIED:
    case v1::SIDE_DEVICE: return Side::device;
    case v1::SIDE_HOST: return Side::host;
    default: return undefined_enum(v1::Side_descriptor(), field, side);
  }
}

Expected<std::optional<ImageKind>> requested_kind(v1::ImageKind kind, std::string_view field) {
  if (kind == v1::KIND_UNSPECIFIED) return std::optional<ImageKind>();
  auto known = from_proto(kind);
  if (!known) return undefined_enum(v1::ImageKind_descriptor(), field, kind);
  return known;
}

static_assert(static_cast<int>(Outcome::hit) == v1::OUTCOME_HIT && static_cast<int>(Outcome::miss) == v1::OUTCOME_MISS &&
              static_cast<int>(Outcome::coalesced) == v1::OUTCOME_COALESCED);
v1::Outcome to_proto(Outcome outcome) { return static_cast<v1::Outcome>(outcome); }  // the same numbers

std::optional<Outcome> from_proto(v1::Outcome outcome) {
  switch (outcome) {
    case v1::OUTCOME_HIT: return Outcome::hit;
    case v1::OUTCOME_MISS: return Outcome::miss;
    case v1::OUTCOME_COALESCED: return Outcome::coalesced;
    default: return std::nullopt;
  }
}

v1::Side to_proto(Side side) { return side == Side::host ? v1::SIDE_HOST : v1::SIDE_DEVICE; }

std::optional<ImageKind> from_proto(v1::ImageKind kind) {
  switch (kind) {
    case v1::KIND_PTX: return ImageKind::ptx;
    case v1::KIND_CUBIN: return ImageKind::cubin;
    case v1::KIND_OBJECT: return ImageKind::object;
    case v1::KIND_LTOIR: return ImageKind::ltoir;
    case v1::KIND_HSACO: return ImageKind::hsaco;
    case v1::KIND_AMDGCN: return ImageKind::amdgcn;
    case v1::KIND_FILE: return ImageKind::file;
    default: return std::nullopt;
  }
}

v1::ImageKind to_proto(ImageKind kind) {
  switch (kind) {
    case ImageKind::ptx: return v1::KIND_PTX;
    case ImageKind::cubin: return v1::KIND_CUBIN;
    case ImageKind::object: return v1::KIND_OBJECT;
    case ImageKind::ltoir: return v1::KIND_LTOIR;
    case ImageKind::hsaco: return v1::KIND_HSACO;
    case ImageKind::amdgcn: return v1::KIND_AMDGCN;
    case ImageKind::file: return v1::KIND_FILE;
  }
  return v1::KIND_UNSPECIFIED;
}

v1::InputFormat to_proto(InputFormat format) {
  switch (format) {
    case InputFormat::llvm_bitcode: return v1::FORMAT_LLVM_BITCODE;
    case InputFormat::llvm_text: return v1::FORMAT_LLVM_TEXT;
    case InputFormat::ptx: return v1::FORMAT_PTX;
    case InputFormat::cuda_cpp: return v1::FORMAT_CUDA_CPP;
  }
  return v1::FORMAT_UNSPECIFIED;
}

namespace {

// A module's format as the request states it, else inferred from its bytes.
Expected<InputFormat> module_format(int format, std::string_view bytes, const std::string& which) {
  switch (format) {
    case v1::FORMAT_LLVM_BITCODE: return InputFormat::llvm_bitcode;
    case v1::FORMAT_LLVM_TEXT: return InputFormat::llvm_text;
    case v1::FORMAT_PTX: return InputFormat::ptx;
    case v1::FORMAT_CUDA_CPP: return InputFormat::cuda_cpp;
    case v1::FORMAT_UNSPECIFIED: return infer_format(bytes);
    default:
      return make_error(ErrorCode::k_invalid_argument, "unknown input format " + std::to_string(format) + " for " +
                                                           which + ": use bitcode, text IR, PTX or CUDA C++");
  }
}

}  // namespace

Expected<JobSpec> job_spec(const v1::CompileRequest& request, std::string_view host_triple, int daemon_ptx_isa) {
  JobSpec spec;
  auto side = from_proto(request.side());
  if (!side) return side.error();
  spec.side = *side;
  auto format = module_format(request.format(), request.module(), "the module");
  if (!format) return format.error();
  spec.format = *format;
  for (int i = 0; i < request.linked_modules_size(); ++i) {
    const v1::LinkedModule& linked = request.linked_modules(i);
    auto f = module_format(linked.format(), linked.module(), "linked module " + std::to_string(i + 1));
    if (!f) return f.error();
    spec.linked_formats.push_back(*f);
  }
  spec.target = request.target();
  if (spec.side == Side::device && spec.target.empty()) {
    spec.target = implied_device_target({request.archs().begin(), request.archs().end()});
  }
  const v1::CompileOptions& o = request.options();
  spec.options.opt_level = o.has_opt_level() ? o.opt_level() : 2;
  spec.options.debug_info = o.debug_info();
  spec.options.lineinfo = o.lineinfo();
  spec.options.fast_math = o.fast_math();
  spec.options.entry_points.assign(o.entry_points().begin(), o.entry_points().end());
  spec.options.cpu = o.cpu();
  if (!v1::HostGuard_IsValid(o.guard())) return undefined_enum(v1::HostGuard_descriptor(), "options.guard", o.guard());
  spec.options.guard = o.guard() == v1::GUARD_STUB ? HostGuard::stub : HostGuard::reject;
  for (const v1::SourceHeader& h : request.headers()) spec.source.headers.push_back({h.name(), sha256(h.content())});
  spec.source.nvrtc_options.assign(request.nvrtc_options().begin(), request.nvrtc_options().end());
  spec.source.name_expressions.assign(request.name_expressions().begin(), request.name_expressions().end());
  if (auto ok = check_cuda_version(request.driver_version()); !ok) return ok.error();
  if (spec.side == Side::device) {
    auto cap = ptx_isa_cap_for(request.driver_version(), daemon_ptx_isa);
    if (!cap) return cap.error();
    spec.ptx_isa_cap = *cap;
  }
  // Anything from 6 up takes all the daemon writes (canonicalize makes it 0).
  spec.amd_code_object_cap =
      static_cast<int>(std::min<std::uint32_t>(request.amd_code_object_version(), k_max_amd_code_object));
  if (auto ok = canonicalize(spec, host_triple); !ok) return ok.error();
  return spec;
}

Expected<std::vector<ImageKind>> emitted_kinds(const v1::CompileRequest& request) {
  std::vector<ImageKind> kinds;
  for (int i = 0; i < request.emit_size(); ++i) {
    std::string field = "emit[" + std::to_string(i) + "]";
    if (request.emit(i) == v1::KIND_UNSPECIFIED) {
      return make_error(ErrorCode::k_invalid_argument, field + " is KIND_UNSPECIFIED: name the kind of image to make");
    }
    auto kind = from_proto(static_cast<v1::ImageKind>(request.emit(i)));
    if (!kind) return undefined_enum(v1::ImageKind_descriptor(), field, request.emit(i));
    kinds.push_back(*kind);
  }
  return kinds;
}

Expected<std::vector<ImageRequest>> image_requests(const v1::CompileRequest& request, const JobSpec& spec) {
  auto kinds = emitted_kinds(request);
  if (!kinds) return kinds.error();
  return plan_images(spec, {request.archs().begin(), request.archs().end()}, *kinds);
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
  request.set_amd_code_object_version(static_cast<std::uint32_t>(spec.amd_code_object_cap));
  request.mutable_nvrtc_options()->Assign(spec.source.nvrtc_options.begin(), spec.source.nvrtc_options.end());
  request.mutable_name_expressions()->Assign(spec.source.name_expressions.begin(), spec.source.name_expressions.end());
}

std::vector<NamedBytes> headers_of(const v1::CompileRequest& request) {
  std::vector<NamedBytes> out;
  out.reserve(request.headers_size());
  for (const v1::SourceHeader& h : request.headers()) out.push_back({h.name(), h.content()});
  return out;
}

void set_headers(const std::vector<NamedBytes>& headers, v1::CompileRequest& request) {
  request.clear_headers();
  for (const NamedBytes& h : headers) {
    v1::SourceHeader* out = request.add_headers();
    out->set_name(h.name.data(), h.name.size());
    out->set_content(h.bytes.data(), h.bytes.size());
  }
}

std::vector<std::string_view> modules_of(const v1::CompileRequest& request) {
  std::vector<std::string_view> out = {request.module()};
  for (const v1::LinkedModule& linked : request.linked_modules()) out.push_back(linked.module());
  return out;
}

void set_modules(const JobSpec& spec, const std::vector<std::string_view>& modules, v1::CompileRequest& request) {
  request.clear_linked_modules();
  for (std::size_t i = 0; i < modules.size(); ++i) {
    if (i == 0) {
      request.set_module(modules[0].data(), modules[0].size());
      continue;
    }
    v1::LinkedModule* linked = request.add_linked_modules();
    if (i - 1 < spec.linked_formats.size()) linked->set_format(to_proto(spec.linked_formats[i - 1]));
    linked->set_module(modules[i].data(), modules[i].size());
  }
}

std::size_t module_bytes(const v1::CompileRequest& request) {
  std::size_t total = request.module().size();
  for (const v1::LinkedModule& linked : request.linked_modules()) total += linked.module().size();
  for (const v1::SourceHeader& h : request.headers()) total += h.name().size() + h.content().size();
  return total;
}

Expected<CompileAsk> compile_ask(const v1::CompileRequest& request, std::string_view host_triple, int daemon_ptx_isa,
                                 std::size_t inline_bytes) {
  // The request's own fields first, then the project's rules on them (job_spec, plan_images).
  CompileAsk ask;
  ask.module_bytes = module_bytes(request);
  ask.archs.assign(request.archs().begin(), request.archs().end());
  ask.driver = request.driver_version();
  ask.inline_bytes = request.digests_only() ? 0 : inline_bytes;
  ask.modules = modules_of(request);
  for (const NamedBytes& h : headers_of(request)) ask.headers.emplace_back(h.name, h.bytes);
  auto kinds = emitted_kinds(request);
  if (!kinds) return kinds.error();
  auto spec = job_spec(request, host_triple, daemon_ptx_isa);
  if (!spec) return spec.error();
  ask.spec = std::move(*spec);
  auto images = plan_images(ask.spec, ask.archs, *kinds);
  if (!images) return images.error();
  ask.images = std::move(*images);
  return ask;
}

Expected<SelectAsk> select_ask(const v1::FetchRequest& request) {
  SelectAsk ask;
  auto side = from_proto(request.side());
  if (!side) return side.error();
  auto kind = requested_kind(request.kind());
  if (!kind) return kind.error();
  ask.side = *side;
  ask.kind = *kind;
  ask.key = request.key();
  ask.arch = request.arch();
  ask.driver = request.driver_version();
  return ask;
}

Expected<std::size_t> count_repeated(const grpc::ByteBuffer& bytes, int field) {
  grpc::ByteBuffer shared(bytes);  // the same slices, referenced again: the reader takes a mutable one
  grpc::ProtoBufferReader reader(&shared);
  google::protobuf::io::CodedInputStream in(&reader);
  std::size_t count = 0;
  for (std::uint32_t tag = in.ReadTag(); tag != 0; tag = in.ReadTag()) {
    if (google::protobuf::internal::WireFormatLite::GetTagFieldNumber(tag) == field) ++count;
    if (!google::protobuf::internal::WireFormatLite::SkipField(&in, tag)) {
      return make_error(ErrorCode::k_invalid_argument, "the request is not a protobuf message (it breaks off or "
                                                       "has a malformed field after " + std::to_string(count) +
                                                       " values of field " + std::to_string(field) + ")");
    }
  }
  if (!in.ConsumedEntireMessage() || !reader.status().ok()) {
    return make_error(ErrorCode::k_invalid_argument, "the request is not a protobuf message");
  }
  return count;
}

namespace {

// `text` cut to at most `limit` bytes without splitting a UTF-8 sequence.
std::string_view cut_utf8(std::string_view text, std::size_t limit) {
  if (text.size() <= limit) return text;
  std::size_t end = limit;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end);
}

}  // namespace

grpc::Status to_status(const Error& error, std::size_t report_bytes) {
  // WOULD_BLOCK never leaves the daemon; were it to, it is a fault of ours.
  auto code = error.code == ErrorCode::k_would_block ? grpc::StatusCode::INTERNAL
                                                      : static_cast<grpc::StatusCode>(error.code);
  constexpr std::string_view k_cut = " ... (cut; the whole message is in the error report)";
  bool cut = error.message.size() > k_max_status_message;
  std::string message(cut ? cut_utf8(error.message, k_max_status_message - k_cut.size()) : error.message);
  if (cut) message += k_cut;
  if (!cut && error.details.empty()) return grpc::Status(code, message);
  v1::ErrorReport report;
  report.set_code(static_cast<int>(error.code));
  report.set_message(std::string(cut_utf8(error.message, report_bytes / 2)));
  std::size_t used = report.ByteSizeLong();
  for (const std::string& line : error.details) {
    std::string_view kept = cut_utf8(line, 4096);  // one item never crowds out the rest
    if (used + kept.size() + 8 > report_bytes) {
      report.set_omitted(report.omitted() + 1);
      continue;
    }
    used += kept.size() + 8;
    report.add_diagnostics(std::string(kept));
  }
  return grpc::Status(code, message, report.SerializeAsString());
}

Error from_status(const grpc::Status& status) {
  Error e{static_cast<ErrorCode>(status.error_code()), status.error_message(), {}};
  v1::ErrorReport report;
  if (!status.error_details().empty() && report.ParseFromString(status.error_details())) {
    if (!report.message().empty()) e.message = report.message();
    e.details.assign(report.diagnostics().begin(), report.diagnostics().end());
    if (report.omitted() > 0) {
      e.details.push_back("... and " + std::to_string(report.omitted()) +
                          " more not sent (the report is capped in size)");
    }
  }
  return e;
}

double hit_ratio(const v1::Stats& stats) {
  std::uint64_t requests = stats.hits() + stats.misses() + stats.coalesced();
  return requests == 0 ? 0.0 : static_cast<double>(stats.hits()) / static_cast<double>(requests);
}

}  // namespace kcache::wire

namespace kcache::wire {

v1::StepTool to_proto(StepTool tool) {
  switch (tool) {
    case StepTool::cicc: return v1::STEP_TOOL_CICC;
    case StepTool::ptxas: return v1::STEP_TOOL_PTXAS;
    case StepTool::host: return v1::STEP_TOOL_HOST;
    case StepTool::clang: return v1::STEP_TOOL_CLANG;
    case StepTool::nvcc: return v1::STEP_TOOL_NVCC;
    case StepTool::nvlink: return v1::STEP_TOOL_NVLINK;
    case StepTool::manifest: return v1::STEP_TOOL_MANIFEST;
  }
  return v1::STEP_TOOL_UNSPECIFIED;
}

std::optional<StepTool> from_proto(v1::StepTool tool) {
  switch (tool) {
    case v1::STEP_TOOL_CICC: return StepTool::cicc;
    case v1::STEP_TOOL_PTXAS: return StepTool::ptxas;
    case v1::STEP_TOOL_HOST: return StepTool::host;
    case v1::STEP_TOOL_CLANG: return StepTool::clang;
    case v1::STEP_TOOL_NVCC: return StepTool::nvcc;
    case v1::STEP_TOOL_NVLINK: return StepTool::nvlink;
    case v1::STEP_TOOL_MANIFEST: return StepTool::manifest;
    default: return std::nullopt;
  }
}

Expected<StepAsk> step_ask(const v1::StepRequest& request) {
  StepAsk ask;
  auto tool = from_proto(request.tool());
  if (!tool) return make_error(ErrorCode::k_invalid_argument, "the step names no tool: use cicc, clang, ptxas, nvlink, host, nvcc or manifest");
  ask.spec.tool = *tool;
  auto identity = digest_from_hex(request.tool_digest());
  if (!identity) {
    return make_error(ErrorCode::k_invalid_argument, "tool_digest is not a SHA-256 (64 hex digits)");
  }
  ask.spec.tool_digest = *identity;
  ask.spec.args.assign(request.args().begin(), request.args().end());
  ask.spec.outputs.assign(request.outputs().begin(), request.outputs().end());
  const bool device = step_side(*tool) == Side::device;
  // A device step's inputs travel as bytes, or all as digests alone: a look-up, answered only
  // from what is stored (a device link's objects and archives are large; sent on its miss).
  const bool look_up = device && request.inputs_size() > 0 &&
                       std::all_of(request.inputs().begin(), request.inputs().end(),
                                   [](const v1::StepFile& f) { return f.content().empty() && !f.sha256().empty(); });
  for (const v1::StepFile& file : request.inputs()) {
    ask.spec.inputs.push_back(file.name());
    if ((device && !look_up) || !file.content().empty()) {
      ask.inputs.push_back(file.content());
      ask.input_digests.push_back(sha256(file.content()));
      ask.input_bytes += file.content().size();
      continue;
    }
    auto digest = digest_from_hex(file.sha256());
    if (!digest) {
      return make_error(ErrorCode::k_invalid_argument,
                        "input '" + file.name().substr(0, 200) + "' has neither content nor a SHA-256 (64 hex digits)");
    }
    ask.input_digests.push_back(*digest);
  }
  if (auto ok = check_step(ask.spec); !ok) return ok.error();
  for (std::size_t i = 0; i < ask.inputs.size(); ++i) {
    if (is_embedded_step_input(ask.spec, ask.spec.inputs[i])) continue;  // bytes clang embeds, never reads
    if (auto ok = check_step_input(ask.spec.tool, ask.spec.inputs[i], ask.inputs[i]); !ok) return ok.error();
  }
  if (request.has_offered()) {
    if (device) return make_error(ErrorCode::k_invalid_argument, "only a host or nvcc step offers an object");
    ask.offered = request.offered().content();
    ask.offered_stderr = request.offered_stderr();
    ask.offered_stdout = request.offered_stdout();
    ask.input_bytes += ask.offered->size() + ask.offered_stderr.size() + ask.offered_stdout.size();
  }
  return ask;
}

v1::StepRequest step_request(const StepSpec& spec, std::span<const std::string> contents, std::span<const Digest> digests) {
  v1::StepRequest request;
  request.set_tool(to_proto(spec.tool));
  request.set_tool_digest(to_hex(spec.tool_digest));
  for (const std::string& a : spec.args) request.add_args(a);
  for (std::size_t i = 0; i < spec.inputs.size(); ++i) {
    v1::StepFile* file = request.add_inputs();
    file->set_name(spec.inputs[i]);
    if (i < contents.size()) file->set_content(contents[i]);
    else if (i < digests.size()) file->set_sha256(to_hex(digests[i]));
  }
  for (const std::string& name : spec.outputs) request.add_outputs(name);
  return request;
}

}  // namespace kcache::wire
