#pragma once
// What an expert-parallel group's engine thread shows other threads (the server's
// GET /admin/expert-state, for the dashboard): the placement in use and the re-placements
// so far, each with when it was planned and switched in, the copies it made and the load's
// balance before and after. The engine thread writes; anyone reads a copy.
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "placement/placement.h"

namespace moe {

struct ReplacementEvent {
  double planned_unix_s = 0;
  int64_t planned_step = 0;  // of the group, since the start
  double plan_ms = 0;        // planning time
  int64_t moves = 0;         // expert copies
  uint64_t bytes = 0;        // of expert weights, over all ranks' copies
  double balance_before = 0, balance_after = 0;  // the planner's balance on the window it planned from
  bool switched = false;
  double switched_unix_s = 0;
  int64_t switched_step = 0;
};

class EpView {
 public:
  static constexpr size_t kMaxEvents = 64;  // the latest are kept

  explicit EpView(placement::Placement initial) : placement_(std::move(initial)) {}

  void planned(const ReplacementEvent& e);
  // The last plan is in use from now on.
  void switched(const placement::Placement& now_in_use, double unix_s, int64_t step);

  placement::Placement placement() const;
  std::vector<ReplacementEvent> events() const;  // oldest first

 private:
  mutable std::mutex mu_;
  placement::Placement placement_;
  std::deque<ReplacementEvent> events_;
};

}  // namespace moe
