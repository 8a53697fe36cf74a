#pragma once
// Command lines that start N ranks of the moengine binary under test with mpirun, the way
// the expert-parallel tests need on a small shared machine: more ranks than cores allowed,
// no pinning (ranks would otherwise share one core), root allowed (CI runs as root), and a
// bound on the whole run.
#include <string>

#include "support/run_cli.h"

namespace moe::testing {

inline std::string mpirun_moengine(int ranks, const std::string& args, int timeout_s = 120) {
  return "timeout -k 5 " + std::to_string(timeout_s) + " mpirun --allow-run-as-root --oversubscribe --bind-to none -np " +
         std::to_string(ranks) + " " + moengine_bin() + " " + args;
}

}  // namespace moe::testing
