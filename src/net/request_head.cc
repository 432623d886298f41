#include "net/internal/request_head.h"

#include <charconv>

#include "core/utf8.h"

namespace infera::net {

void fillRequestHead(const RequestParser::value_type& msg, HttpRequest& out) {
  out.method.assign(msg.method_string().data(), msg.method_string().size());
  out.target.assign(msg.target().data(), msg.target().size());
  size_t n = 0;
  for (const auto& f : msg.base()) {
    if (n == out.headers.size()) out.headers.emplace_back();
    HttpHeader& h = out.headers[n++];
    const auto name = f.name_string();
    h.name.resize(name.size());
    for (size_t i = 0; i < name.size(); ++i) {
      char c = name[i];
      h.name[i] = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    }
    h.value.assign(f.value().data(), f.value().size());
  }
  out.headers.resize(n);
  out.body.clear();
  out.keep_alive = msg.keep_alive();
}

std::string_view requestTextProblem(const HttpRequest& request) {
  if (!validPercentEncodedUtf8(request.target)) {
    return "the request target is not valid UTF-8 once percent-decoded (or has a malformed "
           "percent escape)";
  }
  for (const auto& h : request.headers) {
    if (!validUtf8(h.value)) return "a request header value is not valid UTF-8";
  }
  return {};
}

namespace {

// "http://Host:8080" -> "host:8080" compared with the Host header, ASCII case-insensitively.
bool sameHost(std::string_view origin, std::string_view host) {
  const size_t scheme = origin.find("://");
  if (scheme == std::string_view::npos) return false;
  origin.remove_prefix(scheme + 3);
  host = trimOws(host);
  if (origin.empty() || origin.size() != host.size()) return false;
  for (size_t i = 0; i < origin.size(); ++i) {
    const auto lower = [](char c) { return (c >= 'A' && c <= 'Z') ? char(c - 'A' + 'a') : c; };
    if (lower(origin[i]) != lower(host[i])) return false;
  }
  return true;
}

}  // namespace

std::string crossSiteProblem(const HttpRequest& request, const std::vector<std::string>& allowed) {
  const std::string_view m = request.method;
  if (m == "GET" || m == "HEAD" || m == "OPTIONS") return {};
  // One pass for both headers (every POST of the data plane comes through here); the first of
  // each counts, as HttpRequest::header reads it everywhere else.
  const HttpHeader *site_h = nullptr, *origin_h = nullptr;
  for (const auto& h : request.headers) {
    const std::string_view name = h.name;
    if (!origin_h && name.size() == 6 && name == "origin") origin_h = &h;
    if (!site_h && name.size() == 14 && name == "sec-fetch-site") site_h = &h;
  }
  const std::string_view site = site_h ? trimOws(site_h->value) : std::string_view();
  const std::string_view origin = origin_h ? trimOws(origin_h->value) : std::string_view();
  if (site.empty() && origin.empty()) return {};  // not a browser's request
  // The browser says the page is this server's own (or no page: the address bar, a bookmark).
  if (site == "same-origin" || site == "none") return {};
  for (const auto& a : allowed) {
    if (a == "*" || (!origin.empty() && equalsLowerCase(origin, a))) return {};
  }
  // Without Sec-Fetch-Site (older browsers): the Origin names this server itself.
  if (site.empty() && sameHost(origin, request.header("host"))) return {};
  std::string why = "cross-site request refused: a " + std::string(m) + " from the page at ";
  why += origin.empty() ? std::string("another site") : toValidUtf8(origin);
  why += " (listen.allowed_origins / admin.allowed_origins list the origins allowed)";
  return why;
}

std::string_view trimOws(std::string_view v) {
  while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
  while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
  return v;
}

bool equalsLowerCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const char x = (a[i] >= 'A' && a[i] <= 'Z') ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    if (x != b[i]) return false;
  }
  return true;
}

// RFC 9112 6.3: a request's body length must be read one way by every hop, or a second request can
// hide in the first (smuggling). Anything the gateway could frame differently from a backend is
// refused.
std::string requestHeadProblem(unsigned version, const HttpRequest& request) {
  int hosts = 0, lengths = 0, codings = 0;
  std::string_view length, coding;
  for (size_t i = 0; i < request.headers.size(); ++i) {
    const HttpHeader& h = request.headers[i];
    if (h.name == "host") ++hosts;
    if (h.name == "content-length") {
      if (lengths++ > 0 && trimOws(h.value) != length) return "differing Content-Length headers";
      length = trimOws(h.value);
      if (length.empty() || length.find_first_not_of("0123456789") != std::string_view::npos) {
        return "invalid Content-Length";
      }
    } else if (h.name == "transfer-encoding") {
      ++codings;
      coding = trimOws(h.value);
    } else if (isSingletonHeader(h.name)) {
      for (size_t j = i + 1; j < request.headers.size(); ++j) {
        if (request.headers[j].name == h.name) return "header " + h.name + " is repeated";
      }
    }
  }
  if (codings > 0) {
    if (lengths > 0) return "both Content-Length and Transfer-Encoding";
    if (version < 11) return "Transfer-Encoding in an HTTP/1.0 request";
    // Only chunked, once: a final coding other than chunked leaves the length unknowable, and the
    // server decodes no other coding.
    if (codings > 1 || !equalsLowerCase(coding, "chunked"))
      return "unsupported Transfer-Encoding (only chunked)";
  }
  if (hosts > 1) return "header host is repeated";
  if (version >= 11 && hosts == 0) return "missing Host header";
  const std::string_view reason = unsafePathReason(request.path());
  if (!reason.empty()) return std::string(reason);
  return {};
}

void appendRequestHead(const ClientRequest& req, std::string& out) {
  out += req.method;
  out += ' ';
  out += req.target;
  out += " HTTP/1.1\r\nhost: ";
  out += req.host;
  out += "\r\n";
  for (const auto& h : req.headers) {
    if (req.skip_hop_by_hop && isHopByHopHeader(h.name)) continue;
    if (req.skip_authorization && h.name == "authorization") continue;
    if (!req.request_id.empty() && h.name == "x-request-id") continue;
    if (!req.traceparent.empty() && h.name == "traceparent") continue;
    out += h.name;
    out += ": ";
    out += h.value;
    out += "\r\n";
  }
  if (!req.request_id.empty()) {
    out += "x-request-id: ";
    out += req.request_id;
    out += "\r\n";
  }
  if (!req.traceparent.empty()) {
    out += "traceparent: ";
    out += req.traceparent;
    out += "\r\n";
  }
  if (!req.body.empty() || req.method == "POST" || req.method == "PUT") {
    out += "content-length: ";
    char num[24];
    auto r = std::to_chars(num, num + sizeof(num), req.body.size());
    out.append(num, r.ptr);
    out += "\r\n";
  }
  out += "\r\n";
}

}  // namespace infera::net
