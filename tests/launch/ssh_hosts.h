#pragma once
// Hosts made by a test: network namespaces on a bridge of their own, each with its own
// hostname and an OpenSSH server that takes a key made for the test, so that `moengine
// launch` reaches them over ssh (and mpirun over ssh too) as it would reach real machines.
// Needs root (namespaces, a bridge, sshd); error() says why when they cannot be made.
// Everything is removed when the object goes: every process left in a namespace is killed.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "support/run_cli.h"

namespace moe::testing {

class SshHosts {
 public:
  // `n` hosts named a, b, ...; keys, configs and the servers' logs go to `dir`.
  SshHosts(const std::string& dir, int n) : dir_(dir) {
    if (::geteuid() != 0) {
      error_ = "making hosts (network namespaces and sshd) needs root";
      return;
    }
    for (const char* tool : {"/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen", "/usr/bin/unshare"}) {
      if (!std::filesystem::exists(tool)) {
        error_ = std::string(tool) + " is missing (scripts/setup.sh installs openssh-server and openssh-client)";
        return;
      }
    }
    const std::string tag = std::to_string(::getpid() % 100000);
    bridge_ = "mhb" + tag;
    const std::string net = "10.214." + std::to_string(::getpid() % 200) + ".";
    std::vector<std::string> steps{"mkdir -p /run/sshd", "rm -f " + identity() + " " + identity() + ".pub " + dir + "/host_key*",
                                   "ssh-keygen -q -t ed25519 -N '' -f " + identity(),
                                   "ssh-keygen -q -t ed25519 -N '' -f " + dir + "/host_key",
                                   "cp " + identity() + ".pub " + dir + "/authorized_keys", "ip link add " + bridge_ + " type bridge",
                                   "ip addr add " + net + "1/24 dev " + bridge_, "ip link set " + bridge_ + " up"};
    for (int i = 0; i < n; ++i) {
      const std::string ns = "moe-host-" + tag + "-" + name(i), veth = "mh" + tag + "v" + std::to_string(i);
      namespaces_.push_back(ns);
      addresses_.push_back(net + std::to_string(11 + i));
      steps.insert(steps.end(), {"ip netns add " + ns, "ip link add " + veth + " type veth peer name eth0 netns " + ns,
                                 "ip link set " + veth + " master " + bridge_, "ip link set " + veth + " up",
                                 "ip netns exec " + ns + " ip addr add " + addresses_.back() + "/24 dev eth0",
                                 "ip netns exec " + ns + " ip link set eth0 up", "ip netns exec " + ns + " ip link set lo up",
                                 // mpirun's daemons call back to mpirun at whichever address of
                                 // this machine it names.
                                 "ip netns exec " + ns + " ip route add default via " + net + "1"});
    }
    for (const std::string& s : steps) {
      const CliResult r = run_command(s + " 2>&1");
      if (r.status != 0) {
        error_ = "'" + s + "' failed: " + r.out;
        return;
      }
    }
    for (int i = 0; i < n; ++i) start_sshd(i);
    for (int i = 0; i < n && error_.empty(); ++i) wait_for_login(i);
  }

  ~SshHosts() {
    for (const std::string& ns : namespaces_) {
      (void)run_command("ip netns pids " + ns + " 2>/dev/null | xargs -r kill -9");
    }
    for (pid_t pid : sshd_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    for (const std::string& ns : namespaces_) (void)run_command("ip netns del " + ns + " 2>/dev/null");
    if (!bridge_.empty()) (void)run_command("ip link del " + bridge_ + " 2>/dev/null");
  }

  const std::string& error() const { return error_; }
  static std::string name(int i) { return std::string(1, char('a' + i)); }
  const std::string& address(int i) const { return addresses_[size_t(i)]; }
  std::string identity() const { return dir_ + "/id_test"; }

  // The topology's `hosts:` list: moengine at `binary`, processes starting in `workdir`.
  std::string hosts_yaml(const std::string& binary, const std::string& workdir) const {
    std::string y = "hosts:\n";
    for (size_t i = 0; i < addresses_.size(); ++i) {
      y += "  - {name: " + name(int(i)) + ", address: " + addresses_[i] + ", user: root, identity: " + identity() + ", binary: " +
           binary + ", workdir: " + workdir +
           ", ssh_options: [StrictHostKeyChecking=no, UserKnownHostsFile=/dev/null, LogLevel=ERROR, ConnectTimeout=10]}\n";
    }
    return y;
  }

 private:
  void start_sshd(int i) {
    const std::string conf = dir_ + "/sshd-" + name(i) + ".conf";
    std::ofstream(conf) << "Port 22\nListenAddress " << addresses_[size_t(i)] << "\nListenAddress 127.0.0.1\nHostKey " << dir_
                        << "/host_key\nAuthorizedKeysFile " << dir_
                        << "/authorized_keys\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
                           "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n";
    const std::string log = dir_ + "/sshd-" + name(i) + ".log";
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      // Its own hostname, as a machine has: mpirun tells the nodes of a job apart by it.
      const std::string script = "hostname moe-host-" + name(i) + " && exec /usr/sbin/sshd -D -e -f " + conf;
      ::execlp("ip", "ip", "netns", "exec", namespaces_[size_t(i)].c_str(), "unshare", "--uts", "sh", "-c", script.c_str(), nullptr);
      ::_exit(127);
    }
    ::close(fd);
    sshd_.push_back(pid);
  }

  void wait_for_login(int i) {
    const std::string cmd = "ssh -F none -i " + identity() +
                            " -o BatchMode=yes -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "
                            "-o ConnectTimeout=2 root@" +
                            addresses_[size_t(i)] + " hostname 2>&1";
    CliResult r;
    for (int tries = 0; tries < 50; ++tries) {
      r = run_command(cmd);
      if (r.status == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    error_ = "cannot log in to host " + name(i) + " (" + addresses_[size_t(i)] + ") over ssh: " + r.out;
  }

  std::string dir_, bridge_, error_;
  std::vector<std::string> namespaces_, addresses_;
  std::vector<pid_t> sshd_;
};

}  // namespace moe::testing
