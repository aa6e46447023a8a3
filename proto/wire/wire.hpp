// The boundary between the wire contract and the project's own types: enums, job specs and
// errors. Server and client both convert through here, so the two agree by construction.
#pragma once

#include <grpcpp/support/status.h>

#include <optional>
#include <string>
#include <vector>

#include "kcache/expected.hpp"
#include "kcache/job.hpp"
#include "kcache/v1/kcache.pb.h"

namespace kcache::wire {

Side from_proto(v1::Side side);  // unspecified -> device
v1::Side to_proto(Side side);
std::optional<ImageKind> from_proto(v1::ImageKind kind);  // unspecified -> nullopt
v1::ImageKind to_proto(ImageKind kind);
v1::InputFormat to_proto(InputFormat format);

// The canonical job a request describes (format inferred from the bytes when unspecified).
Expected<JobSpec> job_spec(const v1::CompileRequest& request, std::string_view host_triple);

// The (arch, kind) images a request asks for.
Expected<std::vector<ImageRequest>> image_requests(const v1::CompileRequest& request, const JobSpec& spec);

// Writes a job's spec into a request (the module, archs and emit list are the caller's).
void fill_request(const JobSpec& spec, v1::CompileRequest& request);

grpc::Status to_status(const Error& error);
Error from_status(const grpc::Status& status);

// The share of compile requests answered from the cache, as `ccache -s` shows it: hits over
// hits, misses and coalesced requests (those waited for a compile too); 0 before any. `kcache
// stats` and /metrics both show this figure.
double hit_ratio(const v1::Stats& stats);

}  // namespace kcache::wire
