#include "core/status.h"

namespace infera {

std::string_view statusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case StatusCode::kNotFound:
      return "NOT_FOUND";
    case StatusCode::kAlreadyExists:
      return "ALREADY_EXISTS";
    case StatusCode::kPermissionDenied:
      return "PERMISSION_DENIED";
    case StatusCode::kUnauthenticated:
      return "UNAUTHENTICATED";
    case StatusCode::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case StatusCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case StatusCode::kUnavailable:
      return "UNAVAILABLE";
    case StatusCode::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case StatusCode::kCancelled:
      return "CANCELLED";
    case StatusCode::kPayloadTooLarge:
      return "PAYLOAD_TOO_LARGE";
    case StatusCode::kInternal:
      return "INTERNAL";
    case StatusCode::kUnimplemented:
      return "UNIMPLEMENTED";
  }
  return "UNKNOWN";
}

Status::Status(StatusCode code, std::string message) {
  if (code != StatusCode::kOk) {
    rep_ = std::make_unique<Rep>(Rep{code, std::move(message)});
  }
}

Status::Status(const Status& other)
    : rep_(other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr) {}

Status& Status::operator=(const Status& other) {
  if (this != &other) {
    rep_ = other.rep_ ? std::make_unique<Rep>(*other.rep_) : nullptr;
  }
  return *this;
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

std::string Status::toString() const {
  if (!rep_) return "OK";
  std::string out(statusCodeName(rep_->code));
  out += ": ";
  out += rep_->message;
  return out;
}

Status Status::withContext(std::string_view context) const {
  if (!rep_) return Status();
  std::string m(context);
  m += ": ";
  m += rep_->message;
  return Status(rep_->code, std::move(m));
}

namespace internal {
void checkFailed(const char* file, int line, const char* expr, const std::string& msg) {
  std::fprintf(stderr, "%s:%d: INFERA_CHECK(%s) failed%s%s\n", file, line, expr,
               msg.empty() ? "" : ": ", msg.c_str());
  std::abort();
}
}  // namespace internal

}  // namespace infera

#ifdef INFERA_SANITIZE
// Sanitized builds (CMakeLists.txt): a UBSan finding stops the process, the recoverable vptr check
// too. Here because every binary links this file; UBSAN_OPTIONS adds to (and may override) it.
extern "C" const char* __ubsan_default_options() { return "halt_on_error=1:print_stacktrace=1"; }
#endif
