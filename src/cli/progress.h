#pragma once
// A one-line progress bar on stderr, drawn only when stderr is a terminal (and enabled).

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace infera::cli {

class ProgressBar {
 public:
  ProgressBar(std::string label, bool enabled)
      : label_(std::move(label)), enabled_(enabled && isatty(STDERR_FILENO)) {}
  ~ProgressBar() { done(); }
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // f in [0, 1]; `detail` follows the percentage (counts, rates). Redrawn when either changes.
  void update(double f, const std::string& detail = {}) {
    if (!enabled_) return;
    const int pct = static_cast<int>(std::min(std::max(f, 0.0), 1.0) * 100);
    if (pct == last_ && detail == last_detail_) return;
    last_ = pct;
    last_detail_ = detail;
    drawn_ = true;
    const int width = 40;
    const int filled = pct * width / 100;
    std::fprintf(stderr, "\r%-16s [%s%s] %3d%% %s\033[K", label_.c_str(),
                 std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), pct,
                 detail.c_str());
    std::fflush(stderr);
  }
  // Ends the line (once).
  void done() {
    if (enabled_ && drawn_) std::fprintf(stderr, "\n");
    drawn_ = false;
  }

 private:
  std::string label_;
  bool enabled_;
  bool drawn_ = false;
  int last_ = -1;
  std::string last_detail_;
};

}  // namespace infera::cli
