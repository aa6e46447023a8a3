// The boundary between the wire contract and the project's own types: enums, job specs and
// errors. Server and client both convert through here, so the two agree by construction.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kcache/ask.hpp"
#include "kcache/expected.hpp"
#include "kcache/job.hpp"
#include "kcache/step.hpp"
#include "kcache/v1/kcache.pb.h"

namespace kcache::wire {

// A request's enums are checked here, where every method converts them: proto3 keeps any number a
// peer sends, and a number the enum does not define is INVALID_ARGUMENT naming `field` and the
// number, never a default.
Expected<Side> from_proto(v1::Side side, std::string_view field = "side");  // unspecified -> device
// The kind a request asks for: unspecified -> nullopt.
Expected<std::optional<ImageKind>> requested_kind(v1::ImageKind kind, std::string_view field = "kind");
v1::Side to_proto(Side side);
// The kind of an image a daemon made (a reply, stored metadata): unspecified or unknown -> nullopt.
std::optional<ImageKind> from_proto(v1::ImageKind kind);
v1::ImageKind to_proto(ImageKind kind);
v1::InputFormat to_proto(InputFormat format);
v1::Outcome to_proto(Outcome outcome);
// A reply's outcome: unspecified or unknown -> nullopt.
std::optional<Outcome> from_proto(v1::Outcome outcome);
v1::StepTool to_proto(StepTool tool);
std::optional<StepTool> from_proto(v1::StepTool tool);

// The canonical job a request describes (format inferred from the bytes when unspecified), for a
// daemon on `host_triple` emitting PTX ISA `daemon_ptx_isa` (Capabilities.ptx_isa_version): a
// stated driver older than that gives the job a PTX ISA cap. INVALID_ARGUMENT for a malformed
// driver version, FAILED_PRECONDITION for one that JITs no PTX kcache emits.
Expected<JobSpec> job_spec(const v1::CompileRequest& request, std::string_view host_triple, int daemon_ptx_isa);

// The kinds of image a request asks for (its emit list), each checked.
Expected<std::vector<ImageKind>> emitted_kinds(const v1::CompileRequest& request);
// The (arch, kind) images a request asks for.
Expected<std::vector<ImageRequest>> image_requests(const v1::CompileRequest& request, const JobSpec& spec);

// A Compile request as the cache core takes it (kcache/ask.hpp): the one conversion the daemon
// makes of it (job_spec, image_requests, the modules and headers as views into `request`). The
// reply may carry `inline_bytes` of images inline, none when the request asks for digests only.
Expected<CompileAsk> compile_ask(const v1::CompileRequest& request, std::string_view host_triple, int daemon_ptx_isa,
                                 std::size_t inline_bytes);
// A Fetch request as the cache core takes it, its enums checked.
Expected<SelectAsk> select_ask(const v1::FetchRequest& request);
// A Step request as the cache core's ask, checked (check_step): its tool, a digest for every
// input (computed from the content that device steps must send; a host step's stated), the
// offered object. Views point into `request`.
Expected<StepAsk> step_ask(const v1::StepRequest& request);
// A Step request for `spec`, as step_ask reads it back: each input with its bytes where
// `contents` has them (in the order of spec.inputs), else with its SHA-256 from `digests` (a host
// entry, looked up by what the client read).
v1::StepRequest step_request(const StepSpec& spec, std::span<const std::string> contents,
                             std::span<const Digest> digests = {});

// Writes a job's spec into a request (the modules, archs and emit list are the caller's).
void fill_request(const JobSpec& spec, v1::CompileRequest& request);

// A CUDA C++ job's header: the name its #include spells, and its bytes (both borrowed).
struct NamedBytes {
  std::string_view name;
  std::string_view bytes;
};
// The headers a request carries, in order (views into it).
std::vector<NamedBytes> headers_of(const v1::CompileRequest& request);
// Replaces the request's headers with `headers`.
void set_headers(const std::vector<NamedBytes>& headers, v1::CompileRequest& request);

// A request's module bytes in order: `module`, then each linked module.
std::vector<std::string_view> modules_of(const v1::CompileRequest& request);
// Sets a request's modules (one per spec.module_count()) with the spec's formats.
void set_modules(const JobSpec& spec, const std::vector<std::string_view>& modules, v1::CompileRequest& request);
// All module bytes of a request together, headers with their names included (what
// --max-module-size bounds).
std::size_t module_bytes(const v1::CompileRequest& request);

// How many values of the repeated field numbered `field` the serialized message `bytes` holds at
// its top level, counted without building any (a Lookup's keys, before they are held). Bytes that
// are no protobuf message are INVALID_ARGUMENT.
Expected<std::size_t> count_repeated(const grpc::ByteBuffer& bytes, int field);

// The most bytes of a status message: longer messages are cut there (at a character boundary)
// and the whole text goes into the report.
inline constexpr std::size_t k_max_status_message = 1024;
// Report sizes (kcache.v1.ErrorReport, serialized): what fits under gRPC's default 8 KiB
// metadata limit beside the other headers, and what a client that asked for the whole report
// (k_full_report_header) gets.
inline constexpr std::size_t k_default_report_bytes = 4 * 1024;
inline constexpr std::size_t k_full_report_bytes = 1024 * 1024;
inline constexpr const char* k_full_report_header = "kcache-error-report";  // value "full"

// The status for an error: the message capped at k_max_status_message; where the message was cut
// or the error has details, a kcache.v1.ErrorReport of at most `report_bytes` as the details.
grpc::Status to_status(const Error& error, std::size_t report_bytes = k_default_report_bytes);
// The error a status carries, with the report's whole message and details where it has one.
Error from_status(const grpc::Status& status);

// The share of compile requests answered from the cache, as `ccache -s` shows it: hits over
// hits, misses and coalesced requests (those waited for a compile too); 0 before any. `kcache
// stats` and /metrics both show this figure.
double hit_ratio(const v1::Stats& stats);

}  // namespace kcache::wire
