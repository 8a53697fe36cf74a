#include "launch/stop_signals.h"

#include <signal.h>

#include <atomic>

namespace moe::launch {
namespace {

// A stop signal that reached a thread not blocking it (one a library started before the
// mask was set) runs this handler instead of its default action, which would kill the
// launcher and leave its children to the kernel's parent-death signal.
std::atomic<int> stray_signal{0};
void on_stray_signal(int sig) { stray_signal.store(sig); }

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
  struct sigaction sa {};
  sa.sa_handler = on_stray_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  const sigset_t s = stop_set();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
}

int wait_stop_signal(std::chrono::milliseconds timeout) {
  const sigset_t s = stop_set();
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(timeout);
  const timespec ts{secs.count(), long(std::chrono::duration_cast<std::chrono::nanoseconds>(timeout - secs).count())};
  const int sig = sigtimedwait(&s, nullptr, &ts);
  if (sig == SIGINT || sig == SIGTERM) return sig;
  return stray_signal.exchange(0);
}

}  // namespace moe::launch
