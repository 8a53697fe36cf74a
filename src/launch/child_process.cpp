#include "launch/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace moe::launch {

std::string ExitStatus::describe() const {
  if (signal != 0) {
    const char* abbrev = sigabbrev_np(signal);
    return abbrev ? fmt::format("was killed by signal {} (SIG{})", signal, abbrev) : fmt::format("was killed by signal {}", signal);
  }
  return fmt::format("exited with status {}", code);
}

std::string find_program(const std::string& program, const std::string& purpose) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    const size_t colon = std::min(dirs.find(':', start), dirs.size());
    const std::string dir = dirs.substr(start, colon - start);
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    start = colon + 1;
  }
  fail("{} is not on PATH; {} needs it", program, purpose);
}

ChildProcess::ChildProcess(const std::string& path, const std::vector<std::string>& argv, const std::string& log_path) {
  // Everything the child needs is made before fork(): between fork and exec only
  // async-signal-safe calls are allowed (the launcher may have threads).
  std::vector<std::string> args = argv;
  std::vector<char*> cargs;
  for (std::string& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) fail("cannot open the log file {}: {}", log_path, strerror(errno));
  const int null_in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_in < 0) {
    ::close(log);
    fail("cannot open /dev/null: {}", strerror(errno));
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl took hold
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the launcher blocks the stop signals; the child must not
    ::dup2(null_in, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::execv(path.c_str(), cargs.data());
    const char msg[] = "launch: exec failed\n";
    (void)!::write(2, msg, sizeof msg - 1);
    ::_exit(127);
  }
  const int fork_errno = errno;
  ::close(log);
  ::close(null_in);
  if (pid < 0) fail("cannot start {}: fork failed: {}", path, strerror(fork_errno));
  // Also here, so the group exists before anyone signals it, whichever runs first.
  ::setpgid(pid, pid);
  pid_ = pid;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept : pid_(other.pid_) { other.pid_ = -1; }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    if (running()) kill_and_reap();
    pid_ = other.pid_;
    other.pid_ = -1;
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (running()) kill_and_reap();
}

std::optional<ExitStatus> ChildProcess::poll() {
  if (!running()) return std::nullopt;
  siginfo_t info{};
  // WNOWAIT leaves the child a zombie, which keeps its pid, and so its group id, from being
  // reused while the rest of the group is killed.
  if (::waitid(P_PID, id_t(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) return std::nullopt;
  ::kill(-pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
  ExitStatus s;
  if (WIFSIGNALED(status)) s.signal = WTERMSIG(status);
  else s.code = WEXITSTATUS(status);
  return s;
}

void ChildProcess::terminate() const {
  if (running()) ::kill(-pid_, SIGTERM);
}

void ChildProcess::kill_and_reap() {
  if (!running()) return;
  ::kill(-pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

}  // namespace moe::launch
