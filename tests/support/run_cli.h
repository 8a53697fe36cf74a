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

// Any shell command line, with its stdout (redirect stderr in the line to see it too).
inline CliResult run_command(const std::string& cmd) {
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

inline std::string moengine_bin() {
  const char* b = std::getenv("MOENGINE_BIN");
  return b ? b : "moengine";
}

// Bounded: a command that should have failed at once but serves instead (a missed
// refusal) ends after 10 minutes with status 124, rather than holding the suite.
inline CliResult run_moengine(const std::string& args, bool with_stderr = true) {
  return run_command("timeout --kill-after=10 600 " + moengine_bin() + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

// A folder of its own for one test binary's files.
inline std::string test_dir(const std::string& name) {
  const char* t = std::getenv("MOENGINE_TEST_TMP");
  const std::filesystem::path d = std::filesystem::path(t ? t : "/tmp") / name;
  std::filesystem::create_directories(d);
  return d.string();
}

}  // namespace moe::testing
