#pragma once
// A small blocking HTTP/1.1 client over a real loopback socket, for tests: sends one request,
// reads the head, then reads the body incrementally (de-chunked) so tests can see pieces as they
// arrive, or close mid-response to simulate a client that leaves.

#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace infera::testing {

struct TestResponse {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // lower-case names
  std::string body;                                          // de-chunked
  std::string header(const std::string& name) const;
};

class TestClient {
 public:
  explicit TestClient(uint16_t port, std::chrono::milliseconds timeout = std::chrono::seconds(20));
  ~TestClient();
  TestClient(const TestClient&) = delete;
  TestClient& operator=(const TestClient&) = delete;

  bool connected() const { return fd_ >= 0; }
  // Sends a request (keeps the connection open for reuse).
  bool send(const std::string& method, const std::string& target, const std::string& body,
            const std::vector<std::pair<std::string, std::string>>& headers = {});
  // Writes bytes as they are (a hand-framed request, or several, or half of one).
  bool sendRaw(const std::string& bytes);
  // Everything until the server closes (or the timeout passes), unparsed.
  std::string readAll();
  // Reads the status line and headers; false on EOF/timeout.
  bool readHead(TestResponse& out);
  // Next body piece (de-chunked): empty optional at the end of the body or on error.
  std::optional<std::string> readPiece();
  // Whole exchange on this connection.
  std::optional<TestResponse> request(
      const std::string& method, const std::string& target, const std::string& body = {},
      const std::vector<std::pair<std::string, std::string>>& headers = {});
  void close();
  bool eof() const { return eof_; }

 private:
  bool fill();  // reads more into buf_; false on EOF/error/timeout
  bool readLine(std::string& line);
  bool readExact(size_t n, std::string& out);

  int fd_ = -1;
  std::chrono::milliseconds timeout_;
  std::string buf_;
  size_t pos_ = 0;
  bool eof_ = false;
  bool chunked_ = false;
  int64_t remaining_ = -1;  // content-length left, -1 = until close
  bool body_done_ = false;
};

// Convenience: one request on a fresh connection.
std::optional<TestResponse> httpRequest(
    uint16_t port, const std::string& method, const std::string& target,
    const std::string& body = {},
    const std::vector<std::pair<std::string, std::string>>& headers = {});

// Requests sent each from a thread of its own, recorded by name in the order they complete ("name"
// for a 200, "name:STATUS" otherwise, 0 when none came). Every thread is joined by join() and on
// destruction (a failed assertion that ends the test early included).
class CompletionOrder {
 public:
  CompletionOrder() = default;
  CompletionOrder(const CompletionOrder&) = delete;
  CompletionOrder& operator=(const CompletionOrder&) = delete;
  ~CompletionOrder() { join(); }
  void send(std::string name, std::function<std::optional<TestResponse>()> request);
  // Joins every thread; then the names in completion order.
  std::vector<std::string> join();

 private:
  std::mutex mu_;
  std::vector<std::string> done_;
  std::vector<std::thread> threads_;
};

// Polls `cond` until true or the deadline passes (no fixed sleeps in tests).
bool waitFor(const std::function<bool()>& cond,
             std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace infera::testing
