#include "fakes/tls_pki.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace infera::testing {
namespace {

std::string script() {
  return std::string(INFERA_TEST_SOURCE_DIR) + "/tests/fakes/make_test_pki.sh";
}

bool run(const std::string& cmd) {
  const int rc = std::system(cmd.c_str());
  if (rc != 0) std::fprintf(stderr, "TestPki: '%s' failed (status %d)\n", cmd.c_str(), rc);
  return rc == 0;
}

}  // namespace

std::unique_ptr<TestPki> TestPki::create() {
  std::string tmpl = "/tmp/infera-pki-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "TestPki: mkdtemp failed: %s\n", std::strerror(errno));
    return nullptr;
  }
  std::unique_ptr<TestPki> pki(new TestPki());
  pki->dir_ = tmpl;
  if (!run("bash '" + script() + "' '" + pki->dir_ + "'")) return nullptr;
  return pki;
}

TestPki::~TestPki() {
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

bool TestPki::issue(const std::string& name, const std::string& serial_hex) const {
  return run("bash '" + script() + "' '" + dir_ + "' issue '" + name + "' '" + serial_hex + "'");
}

bool replaceFile(const std::string& from, const std::string& to) {
  std::error_code ec;
  const std::string tmp = to + ".new";
  std::filesystem::copy_file(from, tmp, std::filesystem::copy_options::overwrite_existing, ec);
  if (!ec) std::filesystem::rename(tmp, to, ec);
  if (ec)
    std::fprintf(stderr, "replaceFile(%s, %s): %s\n", from.c_str(), to.c_str(),
                 ec.message().c_str());
  return !ec;
}

}  // namespace infera::testing
