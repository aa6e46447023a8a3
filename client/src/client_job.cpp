#include "kcache/client_job.hpp"

#include "wire/wire.hpp"

namespace kcache {

v1::CompileRequest compile_request(const ClientJob& job) {
  v1::CompileRequest request;
  wire::fill_request(job.spec, request);
  wire::set_modules(job.spec, job.modules, request);
  std::vector<wire::NamedBytes> headers;
  headers.reserve(job.headers.size());
  for (const auto& [name, bytes] : job.headers) headers.push_back({name, bytes});
  wire::set_headers(headers, request);
  request.set_driver_version(job.driver);
  for (const std::string& arch : job.archs) request.add_archs(arch);
  for (ImageKind kind : job.kinds) request.add_emit(wire::to_proto(kind));
  return request;
}

}  // namespace kcache
