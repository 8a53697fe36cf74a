#pragma once
// `moengine launch` as a child process of a test: its stdout and stderr go to files that
// the test waits on, its endpoint table is parsed, and whatever happens (a failed
// assertion included) it and every process it printed are killed when the object goes.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "support/run_cli.h"

namespace moe::testing {

struct Endpoint {
  std::string role, host, url, log;
  pid_t pid = -1;
};

// Alive, and not a zombie waiting for its parent.
inline bool process_alive(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'Z';
}

class LaunchProcess {
 public:
  LaunchProcess(const std::string& topology, const std::string& dir) : out_(dir + "/launch.out"), err_(dir + "/launch.err") {
    const std::string bin = moengine_bin();
    const std::string logs = dir + "/logs";
    // Opened here, not in the child, so that no wait can read a previous run's files.
    const int out = ::open(out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err = ::open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out, 1);
      ::dup2(err, 2);
      ::execl(bin.c_str(), bin.c_str(), "launch", topology.c_str(), "--log-dir", logs.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(out);
    ::close(err);
  }
  ~LaunchProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    for (const auto& [name, e] : endpoints_) {
      if (process_alive(e.pid)) ::kill(-e.pid, SIGKILL);
    }
  }

  std::string out() const { return read(out_); }
  std::string err() const { return read(err_); }

  // Waits up to `limit` for `text` in stdout (or stderr); false if it did not come or
  // launch exited first.
  bool wait_for(const std::string& text, std::chrono::seconds limit, bool in_stderr = false) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if ((in_stderr ? err() : out()).find(text) != std::string::npos) return true;
      if (exited()) return (in_stderr ? err() : out()).find(text) != std::string::npos;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // The proxy's URL once launch says it is ready ("" if not within `limit`); the endpoint
  // table is read then.
  std::string ready_url(std::chrono::seconds limit) {
    const std::string marker = "launch: ready on ";
    if (!wait_for(marker, limit)) return "";
    std::istringstream lines(out());
    std::string url;
    for (std::string line; std::getline(lines, line);) {
      if (line.starts_with(marker)) {
        url = line.substr(marker.size());
        continue;
      }
      std::istringstream cols(line);
      std::string name;
      Endpoint e;
      if (cols >> name >> e.role >> e.host >> e.url >> e.pid >> e.log && name != "NAME") endpoints_[name] = e;
    }
    return url;
  }
  const std::map<std::string, Endpoint>& endpoints() const { return endpoints_; }

  void signal(int sig) const { ::kill(pid_, sig); }

  // The exit status (128 + N for signal N), or -1 if it still runs after `limit`.
  int wait_exit(std::chrono::seconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (status_ < 0 && !exited() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return status_;
  }

 private:
  bool exited() {
    if (status_ >= 0) return true;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) != pid_) return false;
    status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    pid_ = -1;
    return true;
  }
  static std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  std::string out_, err_;
  pid_t pid_ = -1;
  int status_ = -1;
  std::map<std::string, Endpoint> endpoints_;
};

}  // namespace moe::testing
