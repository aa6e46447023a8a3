// A compile job as a client holds it before it asks: the CLI's (from files and flags, or a
// manifest's module) and the C API's (a kcache_job) alike, made into the daemon's request by one
// function.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kcache/driver.hpp"
#include "kcache/job.hpp"
#include "kcache/v1/kcache.pb.h"

namespace kcache {

// The job's bytes are borrowed: they outlive the request made of them.
struct ClientJob {
  // Not yet canonical (the daemon, and Client::compute_key, make it so). Its formats are stated,
  // one per module; source.headers is not sent: the daemon hashes the headers below.
  JobSpec spec;
  std::vector<std::string_view> modules;  // the module, then those linked with it
  std::vector<std::pair<std::string_view, std::string_view>> headers;  // CUDA C++: (include name, bytes)
  std::vector<std::string> archs;
  std::vector<ImageKind> kinds;  // empty: the side's default
  CudaVersion driver = 0;        // the CUDA driver that will load the images; 0: not stated
};

// The Compile request for `job` (the spec through wire::fill_request, its modules, headers, archs,
// kinds and driver). Nothing is checked here: the daemon checks what it is sent.
v1::CompileRequest compile_request(const ClientJob& job);

}  // namespace kcache
