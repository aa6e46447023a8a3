// libFuzzer target: the request decoder and validation, everything a Compile, Fetch, Lookup or
// Step goes through before any compile (for Step: the allow-lists, and the scan of preprocessed
// input for text that would read a file): protobuf decoding, the job spec (format inference,
// canonicalisation, a CUDA C++ job's NVRTC options and include scan), image planning, the key,
// key parsing and image selection. Any input must
// end in a value or a clean Error, never a crash, a sanitizer report or an exception.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kcache/includes.hpp"
#include "kcache/key.hpp"
#include "kcache/select.hpp"
#include "kcache/step.hpp"
#include "wire/wire.hpp"

namespace {

constexpr std::string_view k_host_triple = "x86_64-unknown-linux-gnu";

void compile_request(std::string_view bytes) {
  kcache::v1::CompileRequest request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  auto spec = kcache::wire::job_spec(request, k_host_triple, 90);
  if (!spec) return;
  auto images = kcache::wire::image_requests(request, *spec);
  if (!images) return;
  kcache::Digest fingerprint{};
  std::vector<std::string_view> modules = kcache::wire::modules_of(request);
  kcache::Key key = kcache::compute_key(*spec, modules, fingerprint);
  // The client rebuilds a request from the spec; it must describe the same job.
  kcache::v1::CompileRequest rebuilt;
  kcache::wire::fill_request(*spec, rebuilt);
  kcache::wire::set_modules(*spec, modules, rebuilt);
  kcache::wire::set_headers(kcache::wire::headers_of(request), rebuilt);  // bytes travel beside the spec
  rebuilt.set_driver_version(request.driver_version());  // not part of the spec: it gives the cap
  // A source job's text and headers go through the include scan the daemon runs before NVRTC.
  if (spec->is_source()) {
    std::vector<kcache::IncludeDirective> found = kcache::include_directives(request.module());
    for (const kcache::v1::SourceHeader& h : request.headers()) {
      for (kcache::IncludeDirective& d : kcache::include_directives(h.content())) found.push_back(std::move(d));
    }
    for (const kcache::IncludeDirective& d : found) (void)kcache::include_reaches_out(d.name);
  }
  auto again = kcache::wire::job_spec(rebuilt, k_host_triple, 90);
  if (!again || kcache::compute_key(*again, kcache::wire::modules_of(rebuilt), fingerprint) != key) __builtin_trap();
}

void fetch_request(std::string_view bytes) {
  kcache::v1::FetchRequest request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  auto key = kcache::parse_key(request.key());
  if (key) {
    auto round_trip = kcache::parse_key(key->hex());
    if (!round_trip || !(*round_trip == *key)) __builtin_trap();
  }
  // Selection over a fixed set of stored images, for whatever arch the request names.
  std::vector<kcache::ImageRequest> stored = {{"sm_80", kcache::ImageKind::cubin},
                                              {"sm_90a", kcache::ImageKind::cubin},
                                              {"sm_75", kcache::ImageKind::ptx},
                                              {"x86_64", kcache::ImageKind::object}};
  auto side = kcache::wire::from_proto(request.side());
  auto kind = kcache::wire::requested_kind(request.kind());
  if (side && kind) (void)kcache::select_for_side(*side, stored, request.arch(), *kind);
}

void step_request(std::string_view bytes) {
  // The bytes as a step's input, whatever they are.
  (void)kcache::check_step_input(kcache::StepTool::cicc, "f0.ii", bytes);
  (void)kcache::check_step_input(kcache::StepTool::clang, "f0.cui", bytes);
  (void)kcache::check_step_input(kcache::StepTool::host, "k.cpp", bytes);  // comments and literals set aside
  kcache::v1::StepRequest request;
  if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  auto ask = kcache::wire::step_ask(request);
  if (!ask) return;
  (void)kcache::compute_step_key(ask->spec, ask->input_digests);
  if (ask->spec.tool == kcache::StepTool::host) (void)kcache::check_host_run(ask->spec);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  compile_request(bytes);
  fetch_request(bytes);
  step_request(bytes);
  return 0;
}
