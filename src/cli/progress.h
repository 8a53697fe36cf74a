#pragma once
// A one-line progress bar on stderr for long work (model loading, writing, benchmarks).
// Redraws at most ~10 times a second; on a non-terminal it prints only the final line.
#include <chrono>
#include <cstdint>
#include <string>

namespace moe::cli {

class ProgressBar {
 public:
  explicit ProgressBar(std::string label);
  void update(double fraction, const std::string& detail = "");
  // For writers that report (done_bytes, total_bytes): the fraction and the MiB written.
  void update_bytes(uint64_t done, uint64_t total);
  void done(const std::string& detail = "");

 private:
  void draw(double fraction, const std::string& detail);

  std::string label_;
  bool tty_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace moe::cli
