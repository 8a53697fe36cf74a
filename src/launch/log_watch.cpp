#include "launch/log_watch.h"

#include <deque>
#include <filesystem>
#include <fstream>

namespace moe::launch {
namespace {

// The port of a ready line, or 0 if the line is not one.
int ready_port(const std::string& line) {
  if (!line.starts_with("serving ") && !line.starts_with("proxy on ")) return 0;
  const size_t at = line.rfind(" on http://");
  if (at == std::string::npos) return 0;
  const size_t colon = line.rfind(':');
  if (colon < at + 11) return 0;
  try {
    return std::stoi(line.substr(colon + 1));
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

int ReadyLineWatch::poll() {
  std::ifstream in(path_, std::ios::binary);
  if (!in) return 0;
  in.seekg(std::streamoff(offset_));
  std::string chunk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  offset_ += chunk.size();
  partial_ += chunk;
  size_t start = 0;
  for (size_t nl = partial_.find('\n'); nl != std::string::npos; nl = partial_.find('\n', start)) {
    const int port = ready_port(partial_.substr(start, nl - start));
    start = nl + 1;
    if (port > 0) return port;
  }
  partial_.erase(0, start);
  return 0;
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
