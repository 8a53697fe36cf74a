#include "disagg/same_host.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace moe::disagg {

namespace {

// Random per boot: two processes that read the same one share a kernel.
const std::string& boot_id() {
  static const std::string id = [] {
    std::ifstream in("/proc/sys/kernel/random/boot_id");
    std::string line;
    std::getline(in, line);
    return line;
  }();
  return id;
}

int pidfd_open(pid_t pid) { return int(syscall(SYS_pidfd_open, pid, 0)); }
int pidfd_getfd(int pidfd, int fd) { return int(syscall(SYS_pidfd_getfd, pidfd, fd, 0)); }

}  // namespace

nlohmann::json same_host_advert(const MemoryRegion& region) {
  struct stat st {};
  if (region.fd < 0 || fstat(region.fd, &st) != 0 || boot_id().empty()) return nullptr;
  return {{"boot_id", boot_id()},
          {"pid", int64_t{getpid()}},
          {"fd", region.fd},
          {"dev", uint64_t(st.st_dev)},
          {"inode", uint64_t(st.st_ino)}};
}

bool ucx_tls_allows_shared_memory(const char* tls) {
  if (tls == nullptr || *tls == '\0') return true;
  std::string list = tls;
  const bool negated = list.starts_with('^');
  if (negated) list.erase(0, 1);
  bool named = false, all = false;
  std::stringstream items(list);
  for (std::string item; std::getline(items, item, ',');) {
    all |= item == "all";
    named |= item == "sm" || item == "shm" || item == "mm" || item == "cma" || item == "posix" || item == "sysv";
  }
  return negated ? !named : named || all;
}

std::unique_ptr<SameHostPeer> SameHostPeer::open(const nlohmann::json& advert, uint64_t bytes, std::string& why) {
  if (!advert.is_object()) {
    why = "no memory file advertised";
    return nullptr;
  }
  try {
    if (advert.at("boot_id").get<std::string>() != boot_id()) {
      why = "another host";
      return nullptr;
    }
    const auto pid = advert.at("pid").get<pid_t>();
    const int remote_fd = advert.at("fd").get<int>();
    const auto dev = advert.at("dev").get<uint64_t>();
    const auto inode = advert.at("inode").get<uint64_t>();
    const int pidfd = pidfd_open(pid);
    if (pidfd < 0) {
      why = fmt::format("cannot open process {}: {}", pid, std::strerror(errno));
      return nullptr;
    }
    const int fd = pidfd_getfd(pidfd, remote_fd);
    if (fd < 0) {
      why = fmt::format("cannot take the memory file of process {}: {}", pid, std::strerror(errno));
      close(pidfd);
      return nullptr;
    }
    // The pid may name another process by now, whose descriptor is some other file.
    struct stat st {};
    std::unique_ptr<SharedMapping> mapping;
    if (fstat(fd, &st) != 0 || uint64_t(st.st_dev) != dev || uint64_t(st.st_ino) != inode ||
        uint64_t(st.st_size) < bytes) {
      why = fmt::format("process {} no longer holds the advertised memory", pid);
    } else {
      mapping = SharedMapping::map(fd, size_t(bytes), why);
      if (!mapping) why = fmt::format("cannot map the memory of process {}: {}", pid, why);
    }
    close(fd);
    if (!mapping) {
      close(pidfd);
      return nullptr;
    }
    return std::unique_ptr<SameHostPeer>(new SameHostPeer(pidfd, std::move(mapping)));
  } catch (const nlohmann::json::exception& e) {
    why = fmt::format("malformed same-host advert: {}", e.what());
    return nullptr;
  }
}

SameHostPeer::~SameHostPeer() { close(pidfd_); }

bool SameHostPeer::exited() const {
  pollfd fd{pidfd_, POLLIN, 0};
  return ::poll(&fd, 1, 0) > 0;
}

}  // namespace moe::disagg
