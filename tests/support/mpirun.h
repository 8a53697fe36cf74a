#pragma once
// Command lines that start N ranks of the moengine binary under test with mpirun, the way
// the expert-parallel tests need on a small shared machine: more ranks than cores allowed,
// no pinning (ranks would otherwise share one core), root allowed (CI runs as root), and a
// bound on the whole run.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>
#include <string>
#include <vector>

#include "support/run_cli.h"

namespace moe::testing {

inline std::string mpirun_moengine(int ranks, const std::string& args, int timeout_s = 120) {
  return "timeout -k 5 " + std::to_string(timeout_s) + " mpirun --allow-run-as-root --oversubscribe --bind-to none -np " +
         std::to_string(ranks) + " " + moengine_bin() + " " + args;
}

// The wrapper of a ServeProcess that runs `moengine serve` as `ranks` ranks.
inline std::vector<std::string> mpirun_wrapper(int ranks, int timeout_s = 300) {
  return {"timeout", "-k", "5", std::to_string(timeout_s), "mpirun", "--allow-run-as-root", "--oversubscribe",
          "--bind-to", "none", "-np", std::to_string(ranks)};
}

// The first of `n` consecutive loopback ports that were all free a moment ago: the ranks of
// `serve --ep N --port P` listen on P .. P+N-1.
inline int free_port_run(int n) {
  std::mt19937 rng(std::random_device{}());
  for (int attempt = 0; attempt < 200; ++attempt) {
    const int base = 20000 + int(rng() % 30000);
    bool free = true;
    for (int i = 0; i < n && free; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(uint16_t(base + i));
      free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
      ::close(fd);
    }
    if (free) return base;
  }
  return -1;
}

}  // namespace moe::testing
