#include "kcache/expected.hpp"

namespace kcache {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::k_cancelled: return "CANCELLED";
    case ErrorCode::k_unknown: return "UNKNOWN";
    case ErrorCode::k_invalid_argument: return "INVALID_ARGUMENT";
    case ErrorCode::k_deadline_exceeded: return "DEADLINE_EXCEEDED";
    case ErrorCode::k_not_found: return "NOT_FOUND";
    case ErrorCode::k_resource_exhausted: return "RESOURCE_EXHAUSTED";
    case ErrorCode::k_failed_precondition: return "FAILED_PRECONDITION";
    case ErrorCode::k_aborted: return "ABORTED";
    case ErrorCode::k_unimplemented: return "UNIMPLEMENTED";
    case ErrorCode::k_internal: return "INTERNAL";
    case ErrorCode::k_unavailable: return "UNAVAILABLE";
    case ErrorCode::k_unauthenticated: return "UNAUTHENTICATED";
    case ErrorCode::k_permission_denied: return "PERMISSION_DENIED";
    case ErrorCode::k_would_block: return "WOULD_BLOCK";
  }
  return "UNKNOWN";
}

}  // namespace kcache
