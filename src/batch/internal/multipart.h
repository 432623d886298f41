#pragma once
// Batch internals: a streaming multipart/form-data reader (RFC 7578) for uploads that are never
// held whole: feed() takes the body a piece at a time and calls the sink with each part's head and
// its bytes as they arrive; only a part's headers and the tail that could still be the start of a
// boundary are buffered. Malformed framing (no boundary, a part head over 16 KiB, text after the
// close delimiter that is not whitespace, the body ending inside a part) is kInvalidArgument.

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace infera::batch {

struct PartHead {
  std::string name;          // the form field (Content-Disposition's name)
  std::string filename;      // its filename, "" when it has none
  std::string content_type;  // "" when the part gives none
};

// The boundary of a `multipart/form-data; boundary=...` content type; kInvalidArgument when the
// type is another or the boundary is missing or longer than 70 characters.
Result<std::string> multipartBoundary(std::string_view content_type);

class MultipartReader {
 public:
  struct Sink {
    std::function<Status(const PartHead&)> begin;
    std::function<Status(std::string_view)> data;
    std::function<Status()> end;
  };
  MultipartReader(std::string boundary, Sink sink);
  // The next piece of the body; a sink's error stops the reader and is returned.
  Status feed(std::string_view piece);
  // The body ended: kInvalidArgument unless the close delimiter was read.
  Status finish();

 private:
  enum class State { kPreamble, kAfterDelimiter, kHeaders, kBody, kDone };
  Status parseHead(std::string_view head, PartHead& out);
  Status step();
  const std::string delimiter_;  // "\r\n--" + boundary
  Sink sink_;
  State state_ = State::kPreamble;
  std::string buf_;
  bool in_part_ = false;
};

}  // namespace infera::batch
