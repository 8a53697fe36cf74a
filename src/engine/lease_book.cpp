#include "engine/lease_book.h"

#include <algorithm>

namespace moe {

namespace {
// Expired lease ids remembered for late releases; older ones are answered "unknown".
constexpr size_t kExpiredLeasesKept = 4096;
}  // namespace

const char* lease_release_name(LeaseRelease r) {
  switch (r) {
    case LeaseRelease::kReleased: return "released";
    case LeaseRelease::kExpired: return "expired";
    case LeaseRelease::kUnknown: break;
  }
  return "unknown";
}

void LeaseBook::grant(int64_t id, Clock::time_point expiry) {
  std::lock_guard lk(mu_);
  held_[id] = Lease{expiry, false};
}

LeaseRelease LeaseBook::release(int64_t id, Clock::time_point now) {
  std::lock_guard lk(mu_);
  const auto it = held_.find(id);
  if (it == held_.end()) {
    return std::find(expired_.begin(), expired_.end(), id) != expired_.end() ? LeaseRelease::kExpired : LeaseRelease::kUnknown;
  }
  Lease& l = it->second;
  if (l.ended) return LeaseRelease::kUnknown;
  l.ended = true;
  // Past its time but not swept yet: the blocks were not reused, yet the answer must not
  // depend on when the engine thread got round to the sweep.
  if (l.expiry <= now) {
    ++n_expired_;
    expired_.push_back(id);
    if (expired_.size() > kExpiredLeasesKept) expired_.pop_front();
    return LeaseRelease::kExpired;
  }
  ++n_released_;
  return LeaseRelease::kReleased;
}

std::vector<int64_t> LeaseBook::take_ended(Clock::time_point now) {
  std::lock_guard lk(mu_);
  std::vector<int64_t> out;
  for (auto it = held_.begin(); it != held_.end();) {
    Lease& l = it->second;
    if (!l.ended && l.expiry > now) {
      ++it;
      continue;
    }
    if (!l.ended) {
      ++n_expired_;
      expired_.push_back(it->first);
      if (expired_.size() > kExpiredLeasesKept) expired_.pop_front();
    }
    out.push_back(it->first);
    it = held_.erase(it);
  }
  return out;
}

std::optional<LeaseBook::Clock::time_point> LeaseBook::next_expiry() const {
  std::lock_guard lk(mu_);
  std::optional<Clock::time_point> next;
  for (const auto& [id, l] : held_) {
    if (!l.ended && (!next || l.expiry < *next)) next = l.expiry;
  }
  return next;
}

size_t LeaseBook::n_held() const {
  std::lock_guard lk(mu_);
  return held_.size();
}

uint64_t LeaseBook::n_released() const {
  std::lock_guard lk(mu_);
  return n_released_;
}

uint64_t LeaseBook::n_expired() const {
  std::lock_guard lk(mu_);
  return n_expired_;
}

}  // namespace moe
