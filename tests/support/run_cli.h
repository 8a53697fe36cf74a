#pragma once
// Runs the moengine binary under test (MOENGINE_BIN, set by CTest) and collects its exit
// status and output, for the tests that drive commands end to end.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace moe::testing {

struct CliResult {
  int status;
  std::string out;  // stdout, and stderr too when asked for
};

inline CliResult run_moengine(const std::string& args, bool with_stderr = true) {
  const char* b = std::getenv("MOENGINE_BIN");
  const std::string cmd = std::string(b ? b : "moengine") + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  CliResult r{-1, ""};
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

// A folder of its own for one test binary's files.
inline std::string test_dir(const std::string& name) {
  const char* t = std::getenv("MOENGINE_TEST_TMP");
  const std::filesystem::path d = std::filesystem::path(t ? t : "/tmp") / name;
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace moe::testing
