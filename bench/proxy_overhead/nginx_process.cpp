#include "nginx_process.h"

#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"

namespace moe::bench {

namespace {

using namespace std::chrono_literals;

sockaddr_in loopback(unsigned short port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// A port nothing listens on now; nginx binds it a moment later.
unsigned short free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a = loopback(0);
  socklen_t len = sizeof a;
  const bool ok = fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (fd >= 0) close(fd);
  if (!ok) fail("cannot find a free port on 127.0.0.1 for nginx");
  return ntohs(a.sin_port);
}

bool accepts(unsigned short port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a = loopback(port);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

// Keep-alive on both sides (clients and upstream) with no request limit, as moengine's
// proxy has none; responses unbuffered, so an event stream passes through as it comes.
std::string config_text(const NginxConfig& c, const std::string& dir, unsigned short port) {
  return fmt::format(R"(worker_processes {workers};
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{
  worker_connections 4096;
}}
http {{
  access_log off;
  client_body_temp_path {dir}/client_body;
  proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fastcgi;
  uwsgi_temp_path {dir}/uwsgi;
  scgi_temp_path {dir}/scgi;
  keepalive_requests 1000000000;
  upstream backend {{
    server {upstream};
    keepalive 256;
    keepalive_requests 1000000000;
  }}
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_read_timeout 600s;
    }}
  }}
}}
)",
                     fmt::arg("workers", c.workers), fmt::arg("dir", dir), fmt::arg("upstream", c.upstream),
                     fmt::arg("port", port));
}

}  // namespace

NginxProcess::NginxProcess(NginxConfig config) {
  if (access(config.binary.c_str(), X_OK) != 0) {
    fail("nginx is not at {} (Debian: apt-get install nginx-light, or give its path)", config.binary);
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "moengine-nginx-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) fail("cannot create a temporary folder for nginx's configuration: {}", std::strerror(errno));
  dir_ = tmpl;
  // Run as root, nginx's workers drop to 'nobody', who must still reach the folder.
  chmod(dir_.c_str(), 0755);
  try {
    port_ = free_port();
    const std::string conf = dir_ + "/nginx.conf";
    std::ofstream(conf) << config_text(config, dir_, port_);
    const std::string log = dir_ + "/error.log";
    const pid_t parent = getpid();
    pid_ = fork();
    if (pid_ < 0) fail("cannot start nginx: fork failed: {}", std::strerror(errno));
    if (pid_ == 0) {
      // Its own process group, so that stop() can reach the workers too.
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(1);
      // The parent may block signals it waits for on a thread (interrupt.h); nginx needs them.
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execl(config.binary.c_str(), "nginx", "-p", (dir_ + "/").c_str(), "-c", conf.c_str(), "-e", log.c_str(), "-g",
            "daemon off;", static_cast<char*>(nullptr));
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!accepts(port_)) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        fail("nginx ({}) exited at start ({}): {}", config.binary,
             WIFEXITED(status) ? fmt::format("status {}", WEXITSTATUS(status)) : "killed by a signal", error_log_tail());
      }
      if (std::chrono::steady_clock::now() > deadline) fail("nginx did not accept connections within 10 s: {}", error_log_tail());
      std::this_thread::sleep_for(20ms);
    }
  } catch (...) {
    stop();
    throw;
  }
}

NginxProcess::~NginxProcess() { stop(); }

void NginxProcess::stop() {
  if (pid_ > 0) {
    // TERM is nginx's fast shutdown: the master ends its workers and then itself.
    kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(-pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(10ms);
    }
    pid_ = -1;
  }
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    dir_.clear();
  }
}

std::string NginxProcess::error_log_tail() const {
  std::ifstream in(dir_ + "/error.log");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  if (text.size() > 2000) text = "..." + text.substr(text.size() - 2000);
  return text.empty() ? "(its error log is empty)" : text;
}

}  // namespace moe::bench
