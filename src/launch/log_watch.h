#pragma once
// Reading children's log files: the line that says a server is ready, and the last lines
// for error messages.
#include <cstdint>
#include <string>
#include <vector>

namespace moe::launch {

// A ready line: the port it names and, for a rank of an expert-parallel group (whose
// ranks all write to one log through mpirun: "serving NAME on http://HOST:PORT (rank R of
// N)"), the rank; 0 otherwise.
struct ReadyLine {
  int rank = 0;
  int port = 0;
};

// Follows a log file from `offset` (where the current start of the process began writing)
// for the ready lines that `moengine serve` ("serving NAME on http://HOST:PORT") and
// `moengine proxy` ("proxy on http://HOST:PORT") print on stdout.
class ReadyLineWatch {
 public:
  ReadyLineWatch(std::string path, uint64_t offset) : path_(std::move(path)), offset_(offset) {}
  // The ready lines written since the last call.
  std::vector<ReadyLine> poll();
  uint64_t start() const { return start_; }

 private:
  std::string path_;
  uint64_t offset_;
  uint64_t start_ = offset_;
  std::string partial_;  // the start of a line not yet complete
};

// The first line from `offset` on that contains `needle` (without its end of line), or "".
std::string find_line(const std::string& path, uint64_t offset, const std::string& needle);

// The size of a file, 0 if it does not exist.
uint64_t file_size_or_zero(const std::string& path);

// The last `n` lines of a file, each indented by two spaces (for error messages).
std::string log_tail(const std::string& path, int n);

}  // namespace moe::launch
