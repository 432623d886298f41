#pragma once
// A fresh directory under /tmp, removed when the test process exits (every test runs in a process
// of its own under ctest, and the servers using it are gone by then). Fixtures that make one per
// test or per server use it so that a suite run leaves nothing behind.

#include <stdlib.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace infera::testing {

// `prefix`: the directory's name before its random part ("infera-reg" -> /tmp/infera-reg-XXXXXX).
inline std::string scratchDir(const std::string& prefix) {
  struct Made {
    std::mutex mu;
    std::vector<std::string> dirs;
    ~Made() {
      std::error_code ec;
      for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
    }
  };
  static Made made;
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return "/tmp";
  std::lock_guard<std::mutex> lock(made.mu);
  made.dirs.push_back(tmpl);
  return tmpl;
}

}  // namespace infera::testing
