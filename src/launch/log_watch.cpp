#include "launch/log_watch.h"

#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>

namespace moe::launch {
namespace {

// The ready line that `line` holds from its start on, if it is one.
std::optional<ReadyLine> parse_ready(std::string line) {
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();  // ssh -tt ends lines with \r\n
  ReadyLine r;
  if (line.ends_with(")")) {
    const size_t open = line.rfind(" (rank ");
    if (open == std::string::npos) return std::nullopt;
    if (std::sscanf(line.c_str() + open, " (rank %d of", &r.rank) != 1 || r.rank < 0) return std::nullopt;
    line.erase(open);
  }
  const size_t at = line.rfind(" on http://");
  if (at == std::string::npos) return std::nullopt;
  const size_t colon = line.rfind(':');
  if (colon < at + 11) return std::nullopt;
  try {
    r.port = std::stoi(line.substr(colon + 1));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (r.port <= 0) return std::nullopt;
  return r;
}

// The ready line in `line`, if there is one. Not only at its start: mpirun writes the
// ranks' stdout and stderr into one stream as they come, so a rank's ready line may follow
// the first half of another rank's line.
std::optional<ReadyLine> ready_line(const std::string& line) {
  for (const char* marker : {"serving ", "proxy on "}) {
    for (size_t at = line.find(marker); at != std::string::npos; at = line.find(marker, at + 1)) {
      if (const std::optional<ReadyLine> r = parse_ready(line.substr(at))) return r;
    }
  }
  return std::nullopt;
}

}  // namespace

std::vector<ReadyLine> ReadyLineWatch::poll() {
  std::vector<ReadyLine> out;
  std::ifstream in(path_, std::ios::binary);
  if (!in) return out;
  in.seekg(std::streamoff(offset_));
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  offset_ += chunk.size();
  partial_ += chunk;
  size_t start = 0;
  for (size_t nl = partial_.find('\n'); nl != std::string::npos; nl = partial_.find('\n', start)) {
    if (const std::optional<ReadyLine> r = ready_line(partial_.substr(start, nl - start))) out.push_back(*r);
    start = nl + 1;
  }
  partial_.erase(0, start);
  return out;
}

std::string find_line(const std::string& path, uint64_t offset, const std::string& needle) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  in.seekg(std::streamoff(offset));
  for (std::string line; std::getline(in, line);) {
    if (line.find(needle) == std::string::npos) continue;
    while (!line.empty() && line.back() == '\r') line.pop_back();
    return line;
  }
  return "";
}

uint64_t file_size_or_zero(const std::string& path) {
  std::error_code ec;
  const uintmax_t n = std::filesystem::file_size(path, ec);
  return ec ? 0 : uint64_t(n);
}

std::string log_tail(const std::string& path, int n) {
  std::ifstream in(path, std::ios::binary);
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(std::move(line));
    if (int(lines.size()) > n) lines.pop_front();
  }
  if (lines.empty()) return "  (empty)";
  std::string out;
  for (const std::string& l : lines) out += (out.empty() ? "  " : "\n  ") + l;
  return out;
}

}  // namespace moe::launch
