#include "cli/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace moe::cli {

ProgressBar::ProgressBar(std::string label) : label_(std::move(label)), tty_(::isatty(STDERR_FILENO)) {}

void ProgressBar::draw(double fraction, const std::string& detail) {
  constexpr int kWidth = 30;
  const int filled = int(std::clamp(fraction, 0.0, 1.0) * kWidth);
  std::string bar(size_t(filled), '=');
  bar.resize(kWidth, ' ');
  std::fprintf(stderr, "\r%s [%s] %3d%% %s\033[K", label_.c_str(), bar.c_str(), int(fraction * 100.0 + 0.5),
               detail.c_str());
  std::fflush(stderr);
}

void ProgressBar::update(double fraction, const std::string& detail) {
  if (!tty_ || finished_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(100) && fraction < 1.0) return;
  last_ = now;
  draw(fraction, detail);
}

void ProgressBar::update_bytes(uint64_t done, uint64_t total) {
  update(total ? double(done) / double(total) : 1.0, fmt::format("{:.0f} MiB", double(done) / 1048576.0));
}

void ProgressBar::done(const std::string& detail) {
  if (finished_) return;
  finished_ = true;
  if (tty_) {
    draw(1.0, detail);
    std::fputc('\n', stderr);
  } else {
    std::fprintf(stderr, "%s: done %s\n", label_.c_str(), detail.c_str());
  }
}

}  // namespace moe::cli
