// Expected<T>: a value or an Error (code + message), the result type of every fallible call.
// Errors become grpc::Status only in the service layer and exit codes only in the CLI.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace kcache {

// The subset of gRPC's status codes the project uses, with the same meaning and values.
enum class ErrorCode : int {
  k_cancelled = 1,
  k_unknown = 2,
  k_invalid_argument = 3,
  k_deadline_exceeded = 4,
  k_not_found = 5,
  k_permission_denied = 7,
  k_resource_exhausted = 8,
  k_failed_precondition = 9,
  k_aborted = 10,
  k_unimplemented = 12,
  k_internal = 13,
  k_unavailable = 14,
  k_unauthenticated = 16,
  // Not a gRPC code, and never sent: a read that may not wait (Store::Reach::memory) would have
  // to. The HTTP listener's event threads pass such a request to a pool thread.
  k_would_block = 1000,
};

// Name of a code as gRPC spells it (INVALID_ARGUMENT, ...).
const char* error_code_name(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::k_internal;
  std::string message;  // what a person reads first: short (the gRPC status carries at most 1 KiB)
  // The whole report where it is long (each undefined symbol with all its users, ...), one line
  // per item; it travels beside the status (kcache.v1.ErrorReport).
  std::vector<std::string> details;
};

inline Error make_error(ErrorCode code, std::string message, std::vector<std::string> details = {}) {
  return Error{code, std::move(message), std::move(details)};
}

inline Error would_block() { return Error{ErrorCode::k_would_block, "the answer needs a wait", {}}; }
inline bool is_would_block(const Error& e) { return e.code == ErrorCode::k_would_block; }

template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : m_state(std::move(value)) {}       // NOLINT: implicit by design
  Expected(Error error) : m_state(std::move(error)) {}   // NOLINT: implicit by design

  bool ok() const { return std::holds_alternative<T>(m_state); }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<T>(m_state); }
  const T& value() const& { return std::get<T>(m_state); }
  T&& value() && { return std::get<T>(std::move(m_state)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const { return std::get<Error>(m_state); }

 private:
  std::variant<T, Error> m_state;
};

template <>
class [[nodiscard]] Expected<void> {
 public:
  Expected() = default;
  Expected(Error error) : m_error(std::move(error)) {}  // NOLINT: implicit by design

  bool ok() const { return !m_error.has_value(); }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return *m_error; }

 private:
  std::optional<Error> m_error;
};

}  // namespace kcache
