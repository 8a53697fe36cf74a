#pragma once
// Ctrl-C and SIGTERM as a flag the benchmark polls, so that it stops between requests and
// unwinds: nginx is stopped and its temporary folder removed, as after a normal run.
// Construct it first in main, before any thread starts: the signals are blocked in every
// thread and waited for on one of this object's own.
#include <atomic>
#include <thread>

namespace moe::bench {

class InterruptFlag {
 public:
  InterruptFlag();
  ~InterruptFlag();
  InterruptFlag(const InterruptFlag&) = delete;
  InterruptFlag& operator=(const InterruptFlag&) = delete;

  const std::atomic<bool>& raised() const { return raised_; }

 private:
  std::atomic<bool> raised_{false};
  std::atomic<bool> done_{false};
  std::thread waiter_;
};

}  // namespace moe::bench
