#pragma once
// A throwaway PKI for TLS tests: tests/fakes/make_test_pki.sh (the openssl CLI) run into a fresh
// temporary directory, removed by the destructor. No key is committed. A missing openssl, or a
// script that fails, is a test failure (create() returns nullptr and says why on stderr).

#include <cstdint>
#include <memory>
#include <string>

namespace infera::testing {

class TestPki {
 public:
  static std::unique_ptr<TestPki> create();
  ~TestPki();
  const std::string& dir() const { return dir_; }
  // DIR/name ("ca.pem", "server.key", ...); see make_test_pki.sh for what is there.
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  // Another server certificate NAME.pem/.key signed by the CA (hex serial, same names as server).
  bool issue(const std::string& name, const std::string& serial_hex) const;

 private:
  TestPki() = default;
  std::string dir_;
};

// Replaces `to` with a copy of `from` atomically (written beside it, then renamed), as a
// certificate rotation does.
bool replaceFile(const std::string& from, const std::string& to);

}  // namespace infera::testing
