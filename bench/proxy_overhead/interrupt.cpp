#include "interrupt.h"

#include <signal.h>

#include <ctime>

namespace moe::bench {

namespace {

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

InterruptFlag::InterruptFlag() {
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  waiter_ = std::thread([this, set] {
    // Wakes now and then to see whether the benchmark is over.
    const timespec tick{0, 100'000'000};
    while (!done_) {
      if (sigtimedwait(&set, nullptr, &tick) > 0) raised_ = true;
    }
  });
}

InterruptFlag::~InterruptFlag() {
  done_ = true;
  waiter_.join();
}

}  // namespace moe::bench
