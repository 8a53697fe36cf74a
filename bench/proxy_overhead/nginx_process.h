#pragma once
// nginx as the benchmark's peer: a plain reverse proxy in front of one upstream, started as
// a child process from a configuration written to a temporary folder (logs, pid file and
// temp paths there too), and stopped, with every process it started, when this object goes
// away. The child also gets SIGTERM if this process dies first, so no nginx outlives a
// benchmark.
#include <sys/types.h>

#include <string>

namespace moe::bench {

struct NginxConfig {
  std::string binary = "/usr/sbin/nginx";
  std::string upstream;  // "127.0.0.1:PORT"
  int workers = 2;
};

class NginxProcess {
 public:
  // Starts nginx and waits (at most 10 s) until it accepts connections. Throws moe::Error
  // when the binary is missing, the configuration is refused or nginx does not come up,
  // with the end of its error log.
  explicit NginxProcess(NginxConfig config);
  ~NginxProcess();
  NginxProcess(const NginxProcess&) = delete;
  NginxProcess& operator=(const NginxProcess&) = delete;

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void stop();
  std::string error_log_tail() const;

  std::string dir_;
  unsigned short port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace moe::bench
