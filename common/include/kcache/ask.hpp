// What a front end asks of the cache, in the project's own types: each front end (gRPC, HTTP)
// converts its request into one of these once, at its edge, and the cache core never sees a
// protocol's types.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kcache/driver.hpp"
#include "kcache/job.hpp"
#include "kcache/sha256.hpp"
#include "kcache/step.hpp"

namespace kcache {

// A compile: the canonical job, the images it asks for, and its bytes (views into the request,
// which outlives the call).
struct CompileAsk {
  JobSpec spec;
  std::vector<ImageRequest> images;  // plan_images' list, in the order the reply keeps
  std::vector<std::string_view> modules;  // one per spec.module_count(), in order
  std::vector<std::pair<std::string_view, std::string_view>> headers;  // CUDA C++: (include name, bytes)
  std::vector<std::string> archs;  // as the request named them (the log's)
  CudaVersion driver = 0;          // the client's driver; 0: not stated
  // All module bytes with the headers and their names: what --max-module-size bounds.
  std::size_t module_bytes = 0;
  // Image bytes the reply may carry inline; the others the client fetches (0: digests only).
  std::size_t inline_bytes = 0;
};

// A build step (kcache/step.hpp): checked by the front end (check_step), its inputs' bytes as
// views into the request.
struct StepAsk {
  StepSpec spec;
  std::vector<std::string_view> inputs;  // device steps: the bytes of each of spec.inputs
  std::vector<Digest> input_digests;     // of each of spec.inputs (a host step sends these alone)
  std::optional<std::string_view> offered;  // host steps: the object the client compiled, to keep
  std::string_view offered_stderr;          // and what that compile printed
  std::string_view offered_stdout;
  std::size_t input_bytes = 0;              // inputs and offered object: what --max-module-size bounds
  std::string client;                       // who asked, for the log: a token's name, or the peer
};

// A fetch: the image of a key that a device runs best, by CUDA's (or ROCm's) rules.
struct SelectAsk {
  Side side = Side::device;
  std::string key;   // hex, as the client sent it (checked by the cache)
  std::string arch;  // the device: sm_XX, an AMD target ID, or a host CPU arch
  std::optional<ImageKind> kind;  // only this kind; nullopt: any
  CudaVersion driver = 0;         // the client's driver; 0: not stated (no filter)
};

}  // namespace kcache
