#include "batch/internal/multipart.h"

#include <algorithm>
#include <cctype>

#include "core/text.h"
#include "core/utf8.h"

namespace infera::batch {

namespace {

constexpr size_t kMaxHead = 16 * 1024;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// The value of `param` in a header value's `; name=value` list (quoted or not), or nothing.
bool headerParam(std::string_view value, std::string_view param, std::string& out) {
  size_t i = value.find(';');
  while (i != std::string_view::npos) {
    ++i;
    while (i < value.size() && (value[i] == ' ' || value[i] == '\t')) ++i;
    const size_t eq = value.find('=', i);
    if (eq == std::string_view::npos) return false;
    const std::string name = lower(trim(value.substr(i, eq - i)));
    size_t j = eq + 1;
    std::string v;
    if (j < value.size() && value[j] == '"') {
      ++j;
      while (j < value.size() && value[j] != '"') {
        if (value[j] == '\\' && j + 1 < value.size()) ++j;
        v += value[j++];
      }
      ++j;  // the closing quote
    } else {
      while (j < value.size() && value[j] != ';') v += value[j++];
      v = std::string(trim(v));
    }
    if (name == param) {
      out = std::move(v);
      return true;
    }
    i = value.find(';', j);
  }
  return false;
}

}  // namespace

Result<std::string> multipartBoundary(std::string_view content_type) {
  const size_t semi = content_type.find(';');
  if (lower(trim(content_type.substr(0, semi))) != "multipart/form-data")
    return Status::invalidArgument("expected a multipart/form-data body");
  std::string b;
  if (!headerParam(content_type, "boundary", b) || b.empty() || b.size() > 70)
    return Status::invalidArgument("the multipart/form-data content type has no valid boundary");
  return b;
}

MultipartReader::MultipartReader(std::string boundary, Sink sink)
    : delimiter_("\r\n--" + boundary), sink_(std::move(sink)) {
  buf_ = "\r\n";  // the first boundary has no line break before it
}

Status MultipartReader::parseHead(std::string_view head, PartHead& out) {
  bool disposition = false;
  size_t i = 0;
  while (i < head.size()) {
    size_t eol = head.find("\r\n", i);
    if (eol == std::string_view::npos) eol = head.size();
    const std::string_view line = head.substr(i, eol - i);
    i = eol + 2;
    if (line.empty()) continue;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos)
      return Status::invalidArgument("a multipart part header without ':'");
    const std::string name = lower(trim(line.substr(0, colon)));
    const std::string_view value = trim(line.substr(colon + 1));
    if (name == "content-disposition") {
      if (lower(trim(value.substr(0, value.find(';')))) != "form-data")
        return Status::invalidArgument("a multipart part that is not form-data");
      if (!headerParam(value, "name", out.name))
        return Status::invalidArgument("a multipart part without a name");
      headerParam(value, "filename", out.filename);
      disposition = true;
    } else if (name == "content-type") {
      out.content_type = std::string(value);
    }
  }
  if (!disposition) return Status::invalidArgument("a multipart part without Content-Disposition");
  if (!validUtf8(out.name) || !validUtf8(out.filename))
    return Status::invalidArgument("a multipart part name or filename that is not valid UTF-8");
  return Status::ok();
}

Status MultipartReader::step() {
  for (;;) {
    switch (state_) {
      case State::kPreamble: {
        const size_t at = buf_.find(delimiter_);
        if (at == std::string::npos) {
          // Keep what could still be the start of the delimiter.
          if (buf_.size() >= delimiter_.size()) buf_.erase(0, buf_.size() - delimiter_.size() + 1);
          if (buf_.size() > kMaxHead) return Status::invalidArgument("no multipart boundary");
          return Status::ok();
        }
        buf_.erase(0, at + delimiter_.size());
        state_ = State::kAfterDelimiter;
        break;
      }
      case State::kAfterDelimiter: {
        if (buf_.size() < 2) return Status::ok();
        if (buf_.compare(0, 2, "--") == 0) {
          buf_.erase(0, 2);
          state_ = State::kDone;
          break;
        }
        // Transport padding (spaces and tabs) may follow the boundary before its line break.
        size_t i = 0;
        while (i < buf_.size() && (buf_[i] == ' ' || buf_[i] == '\t')) ++i;
        if (buf_.size() - i < 2) {
          if (i > 256) return Status::invalidArgument("malformed multipart boundary line");
          return Status::ok();
        }
        if (buf_.compare(i, 2, "\r\n") != 0)
          return Status::invalidArgument("malformed multipart boundary line");
        buf_.erase(0, i + 2);
        state_ = State::kHeaders;
        break;
      }
      case State::kHeaders: {
        size_t end = std::string::npos;
        if (buf_.compare(0, 2, "\r\n") == 0) {
          end = 0;  // a part without headers
        } else {
          const size_t at = buf_.find("\r\n\r\n");
          if (at != std::string::npos) end = at + 2;
        }
        if (end == std::string::npos) {
          if (buf_.size() > kMaxHead)
            return Status::invalidArgument("a multipart part's headers are over 16 KiB");
          return Status::ok();
        }
        PartHead head;
        INFERA_RETURN_IF_ERROR(parseHead(std::string_view(buf_).substr(0, end), head));
        buf_.erase(0, end + 2);
        INFERA_RETURN_IF_ERROR(sink_.begin(head));
        in_part_ = true;
        state_ = State::kBody;
        break;
      }
      case State::kBody: {
        const size_t at = buf_.find(delimiter_);
        if (at == std::string::npos) {
          // Everything but a tail that could be the start of the delimiter is the part's.
          if (buf_.size() >= delimiter_.size()) {
            const size_t give = buf_.size() - delimiter_.size() + 1;
            INFERA_RETURN_IF_ERROR(sink_.data(std::string_view(buf_).substr(0, give)));
            buf_.erase(0, give);
          }
          return Status::ok();
        }
        if (at > 0) INFERA_RETURN_IF_ERROR(sink_.data(std::string_view(buf_).substr(0, at)));
        buf_.erase(0, at + delimiter_.size());
        in_part_ = false;
        INFERA_RETURN_IF_ERROR(sink_.end());
        state_ = State::kAfterDelimiter;
        break;
      }
      case State::kDone: {
        // An epilogue is allowed and ignored; keep none of it.
        buf_.clear();
        return Status::ok();
      }
    }
  }
}

Status MultipartReader::feed(std::string_view piece) {
  if (state_ == State::kDone) return Status::ok();
  buf_.append(piece);
  return step();
}

Status MultipartReader::finish() {
  if (state_ != State::kDone)
    return Status::invalidArgument("the multipart body ended before its closing boundary");
  return Status::ok();
}

}  // namespace infera::batch
