#pragma once
// The expert-parallel group's expert load, step by step: the token-expert pairs routed to
// each logical expert of each MoE layer (every rank's tokens), and the pairs each rank
// computed. Each rank counts its own share of a step; every kSyncSteps steps of the group,
// and whenever the group goes idle, the ranks add their counts together, so that every rank
// holds the same group-wide window: what `moengine placement` reads as a trace, and what a
// live re-placement plans from. The window keeps the last `capacity` steps.
//
// The engine thread records and syncs; window() and the figures may be read from any thread.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

#include "moe/ep_comm.h"
#include "placement/trace.h"

namespace moe {

// The steps synced within one wall-clock period, for the dashboard's imbalance over time.
struct LoadPeriod {
  double start_unix_s = 0;
  int64_t steps = 0;
  std::vector<int64_t> rank_pairs;  // [layers * ranks]: pairs each rank computed
};

class ExpertLoadRecorder {
 public:
  static constexpr int64_t kSyncSteps = 16;
  // As the proxy's window: ten minutes of 2 s periods.
  static constexpr double kPeriodSeconds = 2.0;
  static constexpr size_t kPeriods = 300;
  using WallClock = std::chrono::system_clock;

  ExpertLoadRecorder(int64_t layers, int64_t experts, int32_t ranks, int64_t capacity);

  // This rank's share of the step running: `n` experts chosen by its tokens in `layer`, and
  // pairs computed here for any rank's tokens.
  void add_routed(int64_t layer, const int32_t* experts, int64_t n);
  void add_computed(int64_t layer, int64_t pairs);
  // The step ended (on every rank at the same step of the group).
  void end_step();
  bool sync_due() const { return pending_ >= kSyncSteps; }
  bool has_pending() const { return pending_ > 0; }
  // Adds the ranks' pending steps together into the window: a collective, called by every
  // rank at the same step.
  // The steps land in the period of `now`.
  void sync(EpComm& comm, WallClock::time_point now = WallClock::now());

  // The group's load over the window, oldest step first: f32 [steps, layers, experts].
  placement::Trace window() const;
  // The same summed over its steps, [layers * experts], and the steps it holds.
  std::vector<int64_t> window_load(int64_t* steps = nullptr) const;
  // Over the window, oldest step first: the pairs each rank computed in each layer,
  // [steps][layers * ranks].
  std::vector<std::vector<int64_t>> rank_pairs() const;
  // The same summed over the window's steps, [layers * ranks].
  std::vector<int64_t> window_rank_pairs() const;
  // The last kPeriods periods in which steps were synced, oldest first.
  std::vector<LoadPeriod> periods() const;
  int32_t ranks() const { return ranks_; }
  // Pairs this rank's experts computed, for any rank's requests, since the start.
  uint64_t computed_total() const;
  // Over the window: the layers' busiest ranks' computed pairs over their mean ranks' (each
  // layer waits for its busiest rank); 1 is even, 0 before any.
  double imbalance() const;
  // Steps synced since the start (the window holds the last `capacity` of them).
  int64_t synced_steps() const;
  int64_t layers() const { return layers_; }
  int64_t experts() const { return experts_; }

 private:
  const int64_t layers_, experts_;
  const int32_t ranks_;
  const int64_t capacity_;
  // Engine thread: this rank's counts of the steps not yet synced.
  int64_t pending_ = 0;
  std::vector<int64_t> routed_;    // [kSyncSteps, layers, experts]
  std::vector<int64_t> computed_;  // [kSyncSteps, layers]: this rank's pairs

  std::atomic<uint64_t> computed_total_{0};
  mutable std::mutex mu_;
  // Rings of the group's synced steps: `filled_` of them, the oldest at `head_`.
  std::vector<float> load_;                  // [capacity, layers, experts]
  std::vector<int64_t> rank_computed_;       // [capacity, layers, ranks]
  int64_t head_ = 0, filled_ = 0, synced_ = 0;
  std::vector<int64_t> window_pairs_;  // [layers, ranks]: rank_computed_ summed over the window
  std::vector<int64_t> window_load_;   // [layers, experts]: load_ summed over the window
  double imbalance_ = 0.0;             // of window_pairs_, set by each sync
  std::deque<LoadPeriod> periods_;
};

// Pairs computed per layer and rank, [layers * ranks], summed over steps: the sum over layers
// of the busiest rank's pairs over the sum of the mean rank's (0 when there are none).
double layer_imbalance(const std::vector<int64_t>& pairs, int64_t layers, int32_t ranks);
// The same per layer: its busiest rank's pairs over its mean rank's (0 for a layer without any).
std::vector<double> per_layer_imbalance(const std::vector<int64_t>& pairs, int64_t layers, int32_t ranks);

}  // namespace moe
