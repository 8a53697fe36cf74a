#pragma once
// Child processes of the moengine binary under test that serve HTTP: started with their
// arguments, ready once their first stdout line names the URL, stopped with SIGTERM (and
// killed, whatever happened, when the object goes).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "support/run_cli.h"

namespace moe::testing {

using namespace std::chrono_literals;

// One `moengine serve` (or `proxy`, ...) child process: stdout is read for the ready line
// ("... on http://HOST:PORT"), stderr goes to a log file.
class ServeProcess {
 public:
  // wrapper: a command line the binary runs under (e.g. {"ip", "netns", "exec", "ns1"}).
  ServeProcess(const std::vector<std::string>& args, const std::string& log_path, const std::string& command = "serve",
               const std::vector<std::string>& wrapper = {})
      : log_(log_path) {
    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      // A group of its own, so that the destructor stops what a wrapper started too (mpirun's ranks).
      ::setpgid(0, 0);
      ::dup2(out[1], 1);
      const int err = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(err, 2);
      ::close(out[0]);
      std::vector<std::string> all = wrapper;
      all.push_back(moengine_bin());
      all.push_back(command);
      all.insert(all.end(), args.begin(), args.end());
      std::vector<char*> argv;
      for (std::string& a : all) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);  // as the child does, whichever runs first
    ::close(out[1]);
    out_ = out[0];
  }
  ~ServeProcess() {
    if (pid_ > 0) {
      ::kill(-pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) ::close(out_);
  }

  // The first stdout line ("serving NAME on http://HOST:PORT"), or "" if none came in time.
  std::string ready_line(std::chrono::seconds limit = 60s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (stdout_.find('\n') == std::string::npos) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      pollfd p{out_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, int(left.count())) <= 0) return "";
      char buf[512];
      const ssize_t n = ::read(out_, buf, sizeof buf);
      if (n <= 0) return "";
      stdout_.append(buf, size_t(n));
    }
    return stdout_.substr(0, stdout_.find('\n'));
  }
  std::string url() {
    const std::string line = ready_line();
    const size_t at = line.find("http://");
    return at == std::string::npos ? "" : line.substr(at);
  }
  int port() {
    const std::string u = url();
    return u.empty() ? -1 : std::stoi(u.substr(u.rfind(':') + 1));
  }

  // SIGTERM, then the exit status (-1 if it did not exit within `limit`).
  int stop(std::chrono::seconds limit = 15s) {
    ::kill(pid_, SIGTERM);
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(20ms);
    }
    return -1;
  }
  std::string log() const {
    std::ifstream in(log_, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
  std::string log_;
  std::string stdout_;
};

}  // namespace moe::testing
