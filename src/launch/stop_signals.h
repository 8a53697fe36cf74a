#pragma once
// SIGINT and SIGTERM ask the launcher to stop its processes, and SIGCHLD says one of them
// ended. All three are blocked and taken synchronously (sigtimedwait), so that they never
// interrupt the launcher half-way through starting or stopping a child.
#include <chrono>

namespace moe::launch {

// Blocks SIGINT, SIGTERM and SIGCHLD for the rest of the process. Call it before any thread
// starts: threads inherit the mask, so none of them takes the signals instead (should one
// still, a handler passes it on to wait_stop_signal).
void block_stop_signals();

// Waits up to `timeout` for one of them: SIGINT or SIGTERM when one came, else 0 (a child
// ended, or the time ran out).
int wait_stop_signal(std::chrono::milliseconds timeout);

}  // namespace moe::launch
