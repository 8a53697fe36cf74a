#pragma once
// A child process in a process group of its own, so that a terminal's Ctrl-C reaches only
// the launcher (which stops the children in its own order) and stopping a child reaches
// everything it started. Its stdout and stderr are appended to a log file, stdin is
// /dev/null, and it gets SIGTERM if the launcher dies without stopping it (even by
// SIGKILL), so no child outlives it.
#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace moe::launch {

struct ExitStatus {
  int code = 0;    // exit status, when it exited
  int signal = 0;  // the signal that ended it, else 0
  bool ok() const { return signal == 0 && code == 0; }
  // "exited with status 1", "was killed by signal 9 (SIGKILL)"
  std::string describe() const;
};

// The path of `program` on $PATH (as a shell finds it); throws moe::Error naming it and
// `purpose` when there is none.
std::string find_program(const std::string& program, const std::string& purpose);

class ChildProcess {
 public:
  ChildProcess() = default;
  // Runs `path` with `argv` (argv[0] included); throws moe::Error if it cannot start.
  ChildProcess(const std::string& path, const std::vector<std::string>& argv, const std::string& log_path);
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  // Kills the whole group and reaps the child if it still runs.
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0; }

  // Without blocking: once the child has exited, kills what is left of its group, reaps it
  // and gives its status (running() is then false); nullopt while it runs.
  std::optional<ExitStatus> poll();
  void terminate() const;  // SIGTERM to the group
  void kill_and_reap();    // SIGKILL to the group, then waits for the child

 private:
  pid_t pid_ = -1;
};

}  // namespace moe::launch
