// Fuzz target: the HTTP/1.1 server's reading of requests, without a socket. The bytes are one
// connection's: read as src/net/server.cc reads them (Beast's request parser into a GrowingBody,
// the same limits, fillRequestHead, requestHeadProblem, the declared-length check, the body read,
// keep-alive requests one after another in one buffer), with Beast's synchronous read_header/read
// on a stream that hands out the bytes (the server uses their async forms, the same parser steps).
//
// Properties, for every input:
//  - the outcome (each request's method, target, headers and body, or the error that ends the
//    connection) is the same whether the bytes arrive at once or a few at a time;
//  - a request the server accepts has a safe path, token header names, header values without
//    CR/LF/NUL, at most one of each singleton header, and a body whose size is its Content-Length;
//  - forwarded as the proxy forwards it (net::appendRequestHead, hop-by-hop headers and the
//    client's credentials dropped), it reads back the same: one complete request, same method,
//    target, headers and body, which the server's own checks accept (no smuggling, no injection).

#include <boost/asio/buffer.hpp>
#include <boost/asio/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_check.h"
#include "net/internal/request_head.h"

namespace {

namespace beast = boost::beast;
namespace http = boost::beast::http;
using boost::system::error_code;
using infera::fuzz::printable;
using infera::net::HttpHeader;
using infera::net::HttpRequest;

// Small limits so that short inputs reach the limit paths (the server's defaults are 16 KiB/8 MiB).
constexpr size_t kMaxHeaderBytes = 1024;
constexpr size_t kMaxBodyBytes = 2048;

// A SyncReadStream over the input, `piece` bytes per read at most, then EOF.
class PieceStream {
 public:
  PieceStream(std::string_view data, size_t piece) : data_(data), piece_(piece) {}
  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers, error_code& ec) {
    if (pos_ == data_.size()) {
      ec = boost::asio::error::eof;
      return 0;
    }
    const size_t n = boost::asio::buffer_copy(
        buffers, boost::asio::buffer(data_.data() + pos_, std::min(piece_, data_.size() - pos_)));
    pos_ += n;
    ec = {};
    return n;
  }
  template <class MutableBufferSequence>
  size_t read_some(const MutableBufferSequence& buffers) {
    error_code ec;
    const size_t n = read_some(buffers, ec);
    if (ec) throw boost::system::system_error(ec);
    return n;
  }

 private:
  std::string_view data_;
  size_t piece_;
  size_t pos_ = 0;
};

bool isTchar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool isToken(std::string_view s) {
  if (s.empty()) return false;
  for (const char c : s) {
    if (!isTchar(c)) return false;
  }
  return true;
}

std::string describe(const HttpRequest& r) {
  std::string out = r.method + " " + r.target + (r.keep_alive ? " keep-alive" : " close") + "\n";
  for (const auto& h : r.headers) out += h.name + ": " + h.value + "\n";
  out += "body " + std::to_string(r.body.size()) + ": " + r.body + "\n";
  return out;
}

// The properties of a request the server accepted.
void checkAccepted(const HttpRequest& r, unsigned version) {
  const std::string what = describe(r);
  FUZZ_CHECK(isToken(r.method), "method is not a token: " + printable(what));
  FUZZ_CHECK(infera::net::unsafePathReason(r.path()).empty(),
             "accepted an unsafe path: " + printable(what));
  FUZZ_CHECK(r.target.find_first_of(std::string_view(" \r\n\0", 4)) == std::string::npos,
             "target with SP/CR/LF/NUL: " + printable(what));
  int hosts = 0;
  std::string_view length;
  bool chunked = false;
  for (size_t i = 0; i < r.headers.size(); ++i) {
    const HttpHeader& h = r.headers[i];
    FUZZ_CHECK(isToken(h.name), "header name is not a token: " + printable(what));
    for (const char c : h.name)
      FUZZ_CHECK(!(c >= 'A' && c <= 'Z'), "header name not lower-cased: " + printable(what));
    FUZZ_CHECK(h.value.find_first_of(std::string_view("\r\n\0", 3)) == std::string::npos,
               "header value with CR/LF/NUL: " + printable(what));
    if (h.name == "host") ++hosts;
    if (h.name == "content-length") length = infera::net::trimOws(h.value);
    if (h.name == "transfer-encoding") chunked = true;
    if (infera::net::isSingletonHeader(h.name)) {
      for (size_t j = i + 1; j < r.headers.size(); ++j) {
        FUZZ_CHECK(r.headers[j].name != h.name, "singleton header repeated: " + printable(what));
      }
    }
  }
  FUZZ_CHECK(hosts <= 1 && (version < 11 || hosts == 1), "Host count wrong: " + printable(what));
  FUZZ_CHECK(length.empty() || !chunked,
             "Content-Length with Transfer-Encoding: " + printable(what));
  if (!length.empty()) {
    uint64_t declared = 0;
    const auto [end, err] = std::from_chars(length.data(), length.data() + length.size(), declared);
    FUZZ_CHECK(
        err == std::errc() && end == length.data() + length.size() && declared == r.body.size(),
        "body size differs from Content-Length: " + printable(what));
  } else if (!chunked) {
    FUZZ_CHECK(r.body.empty(), "body without Content-Length or chunked: " + printable(what));
  }
  FUZZ_CHECK(r.body.size() <= kMaxBodyBytes, "body over the limit: " + printable(what));
}

// The request as the proxy forwards it, read back as a backend (or this server) reads it.
void checkForwarded(const HttpRequest& r) {
  infera::net::ClientRequest c;
  c.method = r.method;
  c.target = r.target;
  c.host = "backend:8000";
  c.headers = r.headers;
  c.body = r.body;
  c.skip_hop_by_hop = true;
  c.skip_authorization = true;
  c.request_id = "rid-1";
  std::string wire;
  infera::net::appendRequestHead(c, wire);
  wire += r.body;

  infera::net::RequestParser p;
  p.header_limit(static_cast<std::uint32_t>(wire.size() + 1));
  p.body_limit(UINT64_MAX);
  p.eager(true);
  error_code ec;
  const size_t used = p.put(boost::asio::buffer(wire), ec);
  FUZZ_CHECK(!ec && p.is_done() && used == wire.size(),
             "the forwarded request does not read back as one request (" + ec.message() +
                 "): " + printable(wire));
  HttpRequest back;
  infera::net::fillRequestHead(p.get(), back);
  back.body = p.get().body();
  FUZZ_CHECK(back.method == r.method && back.target == r.target && back.body == r.body,
             "the forwarded request reads back differently: " + printable(wire));
  std::vector<HttpHeader> want{{"host", "backend:8000"}};
  for (const auto& h : r.headers) {
    if (infera::net::isHopByHopHeader(h.name) || h.name == "authorization" ||
        h.name == "x-request-id")
      continue;
    want.push_back(h);
  }
  want.push_back({"x-request-id", "rid-1"});
  if (!r.body.empty() || r.method == "POST" || r.method == "PUT") {
    want.push_back({"content-length", std::to_string(r.body.size())});
  }
  bool same = want.size() == back.headers.size();
  for (size_t i = 0; same && i < want.size(); ++i) {
    same = want[i].name == back.headers[i].name && want[i].value == back.headers[i].value;
  }
  FUZZ_CHECK(same, "the forwarded headers read back differently: " + printable(wire));
  const std::string problem = infera::net::requestHeadProblem(11, back);
  FUZZ_CHECK(problem.empty(),
             "the forwarded request is refused (" + problem + "): " + printable(wire));
}

bool endsQuietly(const error_code& ec) {
  return ec == http::error::end_of_stream || ec == boost::asio::error::eof ||
         ec == boost::asio::error::operation_aborted || ec == boost::asio::error::connection_reset;
}

// One connection's requests as server.cc's Connection::run reads them; the transcript of what the
// server would do (each accepted request, then the answer that ends the connection).
std::string serve(std::string_view data, size_t piece) {
  PieceStream stream(data, piece);
  beast::flat_buffer buffer;
  std::optional<infera::net::RequestParser> parser;
  HttpRequest req;
  std::string transcript;
  for (int n = 0; n < 100; ++n) {
    parser.emplace();
    parser->header_limit(static_cast<std::uint32_t>(kMaxHeaderBytes));
    parser->body_limit(kMaxBodyBytes);
    error_code ec;
    http::read_header(stream, buffer, *parser, ec);
    if (ec) {
      if (ec == http::error::body_limit) {
        transcript += "413 declared body too large\n";
      } else if (ec == http::error::header_limit) {
        transcript += "431\n";
      } else if (!endsQuietly(ec) && parser->got_some()) {
        // The answer, not Beast's wording: which check trips first can depend on how much of a
        // malformed head has arrived (all bytes: "bad version"; one at a time: "partial message").
        transcript += "400 malformed\n";
      } else {
        transcript += "closed\n";
      }
      return transcript;
    }
    infera::net::fillRequestHead(parser->get(), req);
    const unsigned version = parser->get().version();
    if (const std::string problem = infera::net::requestHeadProblem(version, req);
        !problem.empty()) {
      return transcript + "400 " + problem + "\n";
    }
    if (const auto len = parser->content_length(); len && *len > kMaxBodyBytes) {
      return transcript + "413 declared\n";
    }
    if (!parser->is_done()) {
      // Connection::fillChunkedLead: a chunked body reaches the parser 5 bytes at least.
      while (parser->chunked() && !parser->is_done() && buffer.size() < 5 && !ec) {
        buffer.commit(stream.read_some(buffer.prepare(16 * 1024), ec));
      }
      if (!ec) http::read(stream, buffer, *parser, ec);
      if (ec) {
        if (ec == http::error::body_limit) return transcript + "413 body\n";
        if (!endsQuietly(ec) && ec != http::error::partial_message) {
          return transcript + "400 malformed body\n";
        }
        return transcript + "closed in body\n";
      }
    }
    req.body = std::move(parser->get().body());
    checkAccepted(req, version);
    checkForwarded(req);
    transcript += describe(req);
    if (!req.keep_alive) return transcript + "close\n";
  }
  return transcript;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::string whole = serve(bytes, bytes.size() + 1);
  const std::string split = serve(bytes, size <= 4096 ? 1 : 61);
  FUZZ_CHECK(whole == split, "the outcome depends on how the bytes arrive:\nat once:\n" +
                                 printable(whole) + "\nsplit:\n" + printable(split));
  return 0;
}
