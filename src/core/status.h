#pragma once
// Status and Result<T>: the one error mechanism of Infera (see STYLE.md). Expected failures are a
// Status; bugs are INFERA_CHECK. Both types are cheap to move; an ok Status holds no allocation.

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace infera {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kPermissionDenied,
  kUnauthenticated,
  kResourceExhausted,
  kFailedPrecondition,
  kUnavailable,
  kDeadlineExceeded,
  kCancelled,
  kPayloadTooLarge,
  kInternal,
  kUnimplemented,
};

std::string_view statusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message);

  static Status ok() { return Status(); }
  static Status invalidArgument(std::string m) {
    return {StatusCode::kInvalidArgument, std::move(m)};
  }
  static Status notFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status alreadyExists(std::string m) { return {StatusCode::kAlreadyExists, std::move(m)}; }
  static Status permissionDenied(std::string m) {
    return {StatusCode::kPermissionDenied, std::move(m)};
  }
  static Status unauthenticated(std::string m) {
    return {StatusCode::kUnauthenticated, std::move(m)};
  }
  static Status resourceExhausted(std::string m) {
    return {StatusCode::kResourceExhausted, std::move(m)};
  }
  static Status failedPrecondition(std::string m) {
    return {StatusCode::kFailedPrecondition, std::move(m)};
  }
  static Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status deadlineExceeded(std::string m) {
    return {StatusCode::kDeadlineExceeded, std::move(m)};
  }
  static Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
  static Status payloadTooLarge(std::string m) {
    return {StatusCode::kPayloadTooLarge, std::move(m)};
  }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
  static Status unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }

  bool isOk() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  // Empty for an ok status.
  const std::string& message() const;
  // "NOT_FOUND: no route for model x", or "OK".
  std::string toString() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status withContext(std::string_view context) const;

  Status(const Status& other);
  Status& operator=(const Status& other);
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

 private:
  struct Rep {
    StatusCode code;
    std::string message;
  };
  std::unique_ptr<Rep> rep_;
};

// Holds either a value or a non-ok Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    if (std::get<Status>(v_).isOk()) {
      std::fprintf(stderr, "INFERA_CHECK failed: Result constructed from an ok Status\n");
      std::abort();
    }
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  Status takeStatus() { return ok() ? Status() : std::move(std::get<Status>(v_)); }

  T& value() & {
    check();
    return std::get<T>(v_);
  }
  const T& value() const& {
    check();
    return std::get<T>(v_);
  }
  T&& value() && {
    check();
    return std::get<T>(std::move(v_));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  void check() const {
    if (!ok()) {
      std::fprintf(stderr, "INFERA_CHECK failed: value() on error Result: %s\n",
                   std::get<Status>(v_).toString().c_str());
      std::abort();
    }
  }
  std::variant<T, Status> v_;
};

namespace internal {
[[noreturn]] void checkFailed(const char* file, int line, const char* expr, const std::string& msg);
inline Status asStatus(Status s) { return s; }
template <typename T>
Status asStatus(Result<T>&& r) {
  return r.takeStatus();
}
}  // namespace internal

}  // namespace infera

#define INFERA_CHECK(cond, ...)                                                             \
  do {                                                                                      \
    if (!(cond)) [[unlikely]] {                                                             \
      ::infera::internal::checkFailed(__FILE__, __LINE__, #cond, std::string(__VA_ARGS__)); \
    }                                                                                       \
  } while (0)

#ifdef NDEBUG
#define INFERA_DCHECK(cond, ...) \
  do {                           \
  } while (0)
#else
#define INFERA_DCHECK(cond, ...) INFERA_CHECK(cond, __VA_ARGS__)
#endif

#define INFERA_CONCAT_INNER(a, b) a##b
#define INFERA_CONCAT(a, b) INFERA_CONCAT_INNER(a, b)

#define INFERA_RETURN_IF_ERROR(expr)                                      \
  do {                                                                    \
    ::infera::Status infera_status_ = ::infera::internal::asStatus(expr); \
    if (!infera_status_.isOk()) return infera_status_;                    \
  } while (0)

#define INFERA_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return tmp.takeStatus();            \
  lhs = std::move(tmp).value()

#define INFERA_ASSIGN_OR_RETURN(lhs, expr) \
  INFERA_ASSIGN_OR_RETURN_IMPL(INFERA_CONCAT(infera_result_, __LINE__), lhs, expr)
