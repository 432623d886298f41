#include "fakes/http_test_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace infera::testing {

std::string TestResponse::header(const std::string& name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

TestClient::TestClient(uint16_t port, std::chrono::milliseconds timeout) : timeout_(timeout) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd_);
    fd_ = -1;
    return;
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

TestClient::~TestClient() { close(); }

void TestClient::close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

bool TestClient::send(const std::string& method, const std::string& target, const std::string& body,
                      const std::vector<std::pair<std::string, std::string>>& headers) {
  if (fd_ < 0) return false;
  std::string req = method + " " + target + " HTTP/1.1\r\nhost: 127.0.0.1\r\n";
  bool has_ct = false;
  for (const auto& [k, v] : headers) {
    req += k + ": " + v + "\r\n";
    if (k == "content-type") has_ct = true;
  }
  if (!has_ct && !body.empty()) req += "content-type: application/json\r\n";
  if (!body.empty() || method == "POST")
    req += "content-length: " + std::to_string(body.size()) + "\r\n";
  req += "\r\n";
  req += body;
  return sendRaw(req);
}

bool TestClient::sendRaw(const std::string& req) {
  if (fd_ < 0) return false;
  size_t off = 0;
  while (off < req.size()) {
    const ssize_t n = ::send(fd_, req.data() + off, req.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

bool TestClient::fill() {
  if (fd_ < 0 || eof_) return false;
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout_.count())) <= 0) return false;
  char tmp[16384];
  const ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
  if (n <= 0) {
    eof_ = true;
    return false;
  }
  if (pos_ > 0 && pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  buf_.append(tmp, static_cast<size_t>(n));
  return true;
}

bool TestClient::readLine(std::string& line) {
  for (;;) {
    const size_t nl = buf_.find("\r\n", pos_);
    if (nl != std::string::npos) {
      line = buf_.substr(pos_, nl - pos_);
      pos_ = nl + 2;
      return true;
    }
    if (!fill()) return false;
  }
}

bool TestClient::readExact(size_t n, std::string& out) {
  while (buf_.size() - pos_ < n) {
    if (!fill()) return false;
  }
  out = buf_.substr(pos_, n);
  pos_ += n;
  return true;
}

bool TestClient::readHead(TestResponse& out) {
  std::string line;
  if (!readLine(line)) return false;
  if (line.size() < 12 || line.compare(0, 5, "HTTP/") != 0) return false;
  out.status = std::stoi(line.substr(9, 3));
  out.headers.clear();
  chunked_ = false;
  remaining_ = -1;
  body_done_ = false;
  for (;;) {
    if (!readLine(line)) return false;
    if (line.empty()) break;
    const size_t colon = line.find(':');
    std::string k = line.substr(0, colon);
    for (auto& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string v = line.substr(colon + 1);
    while (!v.empty() && v[0] == ' ') v.erase(0, 1);
    if (k == "transfer-encoding" && v.find("chunked") != std::string::npos) chunked_ = true;
    if (k == "content-length") remaining_ = std::stoll(v);
    out.headers.emplace_back(k, v);
  }
  if (remaining_ == 0 && !chunked_) body_done_ = true;
  return true;
}

std::optional<std::string> TestClient::readPiece() {
  if (body_done_) return std::nullopt;
  if (chunked_) {
    std::string line;
    if (!readLine(line)) return std::nullopt;
    const size_t size = std::stoul(line, nullptr, 16);
    if (size == 0) {
      readLine(line);  // trailing CRLF
      body_done_ = true;
      return std::nullopt;
    }
    std::string data, crlf;
    if (!readExact(size, data) || !readExact(2, crlf)) return std::nullopt;
    return data;
  }
  if (remaining_ >= 0) {
    if (pos_ == buf_.size() && !fill()) return std::nullopt;
    const size_t take = std::min<size_t>(static_cast<size_t>(remaining_), buf_.size() - pos_);
    std::string data = buf_.substr(pos_, take);
    pos_ += take;
    remaining_ -= static_cast<int64_t>(take);
    if (remaining_ == 0) body_done_ = true;
    return data;
  }
  if (pos_ == buf_.size() && !fill()) {
    body_done_ = true;
    return std::nullopt;
  }
  std::string data = buf_.substr(pos_);
  pos_ = buf_.size();
  return data;
}

std::optional<TestResponse> TestClient::request(
    const std::string& method, const std::string& target, const std::string& body,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  if (!send(method, target, body, headers)) return std::nullopt;
  TestResponse r;
  if (!readHead(r)) return std::nullopt;
  while (auto piece = readPiece()) r.body += *piece;
  return r;
}

std::optional<TestResponse> httpRequest(
    uint16_t port, const std::string& method, const std::string& target, const std::string& body,
    const std::vector<std::pair<std::string, std::string>>& headers) {
  TestClient c(port);
  if (!c.connected()) return std::nullopt;
  return c.request(method, target, body, headers);
}

bool waitFor(const std::function<bool()>& cond, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return cond();
}

std::string TestClient::readAll() {
  while (fill()) {
  }
  std::string out = buf_.substr(pos_);
  pos_ = buf_.size();
  return out;
}

void CompletionOrder::send(std::string name, std::function<std::optional<TestResponse>()> request) {
  threads_.emplace_back([this, name = std::move(name), request = std::move(request)] {
    const auto r = request();
    std::lock_guard<std::mutex> lock(mu_);
    done_.push_back(name + (r && r->status == 200 ? "" : ":" + std::to_string(r ? r->status : 0)));
  });
}

std::vector<std::string> CompletionOrder::join() {
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

}  // namespace infera::testing
