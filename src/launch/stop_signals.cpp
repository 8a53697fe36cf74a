#include "launch/stop_signals.h"

#include <signal.h>

namespace moe::launch {
namespace {

sigset_t stop_set() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  sigaddset(&s, SIGCHLD);
  return s;
}

}  // namespace

void block_stop_signals() {
  const sigset_t s = stop_set();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
}

int wait_stop_signal(std::chrono::milliseconds timeout) {
  const sigset_t s = stop_set();
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const timespec ts{secs.count(), long(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout - secs).count())};
  const int sig = sigtimedwait(&s, nullptr, &ts);
  return sig == SIGINT || sig == SIGTERM ? sig : 0;
}

}  // namespace moe::launch
