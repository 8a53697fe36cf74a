#pragma once
// The leases a prefill instance holds on handed-off prompts' KV blocks, readable and
// releasable from any thread. A release must be answered at once: the decode instance
// waits on it, and the engine thread may be busy with a long prefill step for seconds. So
// the decision (released in time, or expired) is taken here under a lock, and the engine
// thread frees the blocks of every ended lease at its next turn (take_ended). Until then the
// blocks stay allocated, which is what makes an answer of "released" true: they were held
// (not reused) until the moment of the release.
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace moe {

// What became of a lease when its decode instance asked to release it.
enum class LeaseRelease {
  kReleased,  // the blocks were held until now: whatever was read from them is good
  kExpired,   // the lease ran out first: the blocks may have been reused meanwhile
  kUnknown,   // no such lease (never granted, or released before)
};
const char* lease_release_name(LeaseRelease r);  // "released", "expired", "unknown"

class LeaseBook {
 public:
  using Clock = std::chrono::steady_clock;

  // Engine thread: request id's blocks are held until expiry.
  void grant(int64_t id, Clock::time_point expiry);
  // Any thread.
  LeaseRelease release(int64_t id, Clock::time_point now);
  // Engine thread: the leases released, or run out by `now`, whose blocks may now be freed.
  std::vector<int64_t> take_ended(Clock::time_point now);
  // When the next lease still held runs out; nullopt with none.
  std::optional<Clock::time_point> next_expiry() const;
  // Leases whose blocks are not freed yet.
  size_t n_held() const;
  uint64_t n_released() const;
  uint64_t n_expired() const;

 private:
  struct Lease {
    Clock::time_point expiry;
    bool ended = false;  // released or expired; blocks not freed yet
  };

  mutable std::mutex mu_;
  std::unordered_map<int64_t, Lease> held_;
  // Leases that ran out recently, so that a late release hears "expired", not "unknown".
  std::deque<int64_t> expired_;
  uint64_t n_released_ = 0, n_expired_ = 0;
};

}  // namespace moe
