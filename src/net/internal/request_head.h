#pragma once
// Net internals: the server's reading of an HTTP/1.1 request head and the client's writing of one,
// as plain functions without a socket, so that server.cc, client.cc and the fuzz targets
// (tests/fuzz/net/) use the same code. Beast appears here because this header is included only by
// src/net/*.cc and by net's own tests.

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "net/client.h"
#include "net/http.h"

namespace infera::net {

// A request body read as it arrives: the buffer grows with the bytes received (geometrically, as a
// string does), never sized from the declared Content-Length, so a client that declares 8 MiB and
// sends one byte holds one byte.
struct GrowingBody {
  using value_type = std::string;
  class reader {
   public:
    template <bool isRequest, class Fields>
    reader(boost::beast::http::header<isRequest, Fields>&, value_type& body) : body_(body) {}
    void init(const boost::optional<std::uint64_t>&, boost::system::error_code& ec) { ec = {}; }
    template <class ConstBufferSequence>
    std::size_t put(const ConstBufferSequence& buffers, boost::system::error_code& ec) {
      size_t n = 0;
      for (auto it = boost::asio::buffer_sequence_begin(buffers);
           it != boost::asio::buffer_sequence_end(buffers); ++it) {
        const boost::asio::const_buffer b = *it;
        body_.append(static_cast<const char*>(b.data()), b.size());
        n += b.size();
      }
      ec = {};
      return n;
    }
    void finish(boost::system::error_code& ec) { ec = {}; }

   private:
    value_type& body_;
  };
};
using RequestParser = boost::beast::http::request_parser<GrowingBody>;

// The head's method, target, headers (names lower-cased) and keep-alive into `out`, body cleared.
// Reuses out's strings (their capacity) instead of allocating anew.
void fillRequestHead(const RequestParser::value_type& msg, HttpRequest& out);

// What is wrong with a request head just read (framing per RFC 9112 6.3, repeated singleton
// headers, Host, an unsafe path), or empty. `version` is 10 or 11.
std::string requestHeadProblem(unsigned version, const HttpRequest& request);

// The floor's check of a request's text: its target (path and query, percent-decoded) and every
// header value are valid UTF-8. The reason when not, else empty.
std::string_view requestTextProblem(const HttpRequest& request);

// The floor's cross-site check (ServerConfig::allowed_origins): the reason a state-changing request
// from another site's page is refused, else empty.
std::string crossSiteProblem(const HttpRequest& request, const std::vector<std::string>& allowed);

// `v` without leading and trailing spaces and tabs.
std::string_view trimOws(std::string_view v);
// ASCII case-insensitive equality against a lower-case `lower`.
bool equalsLowerCase(std::string_view a, std::string_view lower);

// The request head the client sends for `req` (request line, host, the filtered headers,
// x-request-id, content-length, blank line), appended to `out`.
void appendRequestHead(const ClientRequest& req, std::string& out);

}  // namespace infera::net
