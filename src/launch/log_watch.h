#pragma once
// Reading children's log files: the line that says a server is ready, and the last lines
// for error messages.
#include <cstdint>
#include <string>

namespace moe::launch {

// Follows a log file from `offset` (where the current start of the process began writing)
// for the ready line that `moengine serve` ("serving NAME on http://HOST:PORT") and
// `moengine proxy` ("proxy on http://HOST:PORT") print on stdout.
class ReadyLineWatch {
 public:
  ReadyLineWatch(std::string path, uint64_t offset) : path_(std::move(path)), offset_(offset) {}
  // The port the ready line names, once it has been written; 0 until then.
  int poll();

 private:
  std::string path_;
  uint64_t offset_;
  std::string partial_;  // the start of a line not yet complete
};

// The size of a file, 0 if it does not exist.
uint64_t file_size_or_zero(const std::string& path);

// The last `n` lines of a file, each indented by two spaces (for error messages).
std::string log_tail(const std::string& path, int n);

}  // namespace moe::launch
