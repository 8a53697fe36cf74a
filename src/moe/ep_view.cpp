#include "moe/ep_view.h"

namespace moe {

void EpView::planned(const ReplacementEvent& e) {
  std::lock_guard lock(mu_);
  events_.push_back(e);
  if (events_.size() > kMaxEvents) events_.pop_front();
}

void EpView::switched(const placement::Placement& now_in_use, double unix_s, int64_t step) {
  std::lock_guard lock(mu_);
  placement_ = now_in_use;
  if (events_.empty() || events_.back().switched) return;
  events_.back().switched = true;
  events_.back().switched_unix_s = unix_s;
  events_.back().switched_step = step;
}

placement::Placement EpView::placement() const {
  std::lock_guard lock(mu_);
  return placement_;
}

std::vector<ReplacementEvent> EpView::events() const {
  std::lock_guard lock(mu_);
  return {events_.begin(), events_.end()};
}

}  // namespace moe
