#pragma once
// Runs a topology: generates its model if asked, starts every instance as a child process
// of this binary (`moengine serve`), waits until each answers GET /health, starts the proxy
// in front of them, prints the endpoints and `launch: ready on http://HOST:PORT`, then
// watches: an instance that dies is restarted on the same port when its entry says
// `restart: on-failure` (and restarts remain); any other death stops everything.
//
// Threads: one. Signals (SIGINT, SIGTERM, SIGCHLD) are blocked and taken between steps,
// so a stop never interrupts a start half-way.
#include <string>

#include "launch/topology.h"

namespace moe::launch {

struct LaunchOptions {
  std::string log_dir;  // empty: moengine-run/<timestamp>/ in the current folder
};

// Returns once SIGINT or SIGTERM has stopped everything (the proxy first, then the
// instances). Throws moe::Error, everything stopped, when a process fails to start or
// dies and may not be restarted; the message names it, how it ended and its log's tail.
void run_topology(const Topology& t, const LaunchOptions& options);

// What run_topology would run, one shell line per process (`--dry-run`).
std::string dry_run(const Topology& t, const LaunchOptions& options);

}  // namespace moe::launch
