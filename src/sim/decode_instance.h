#pragma once
// A simulated decode instance (one expert-parallel group): continuous batching of the
// requests P hands off, with the rules of the engine's scheduler (admission while sequences
// and KV allow, leaving a watermark free; the newest sequence preempted when the next step's
// KV does not fit, and recomputed on re-admission), kept as per-rank aggregates so that a
// step costs O(ranks), not O(sequences).
//
// Why not the engine's Scheduler, as P and unified instances use: it does O(1) work per
// sequence per step, and DeepSeek's published decode load is about 10^4 sequences stepping
// 10 times a second per instance, some 10^9 sequence-steps per simulated hour; the
// aggregate does O(1) work per rank per step and O(log n) per request.
//
// Sequences advance by tokens_per_step (1 + a + ... + a^k with MTP, the expected
// accepted run) each step, so a request with R output tokens to go finishes
// ceil(R / tokens_per_step) steps after it joined.
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <queue>
#include <vector>

#include "proxy/policy/instance_view.h"
#include "sim/cost_model.h"
#include "sim/sim_request.h"

namespace moe::sim {

class DecodeInstance {
 public:
  DecodeInstance(const CostModel& cost, int32_t first_view, double tokens_per_step, int32_t draft_tokens);

  int32_t ranks() const { return int32_t(ranks_.size()); }
  int32_t first_view() const { return first_view_; }
  // A request handed off to `rank`: it waits there until admitted.
  void route(int32_t rank, int64_t id) { ranks_[size_t(rank)].waiting.push_back(id); }
  // Admits what fits at every rank; returns the (rank, request) pairs whose KV pull may start.
  std::vector<std::pair<int32_t, int64_t>> admit(std::vector<SimRequest>& requests);
  // The request's KV has arrived: it joins the batch at the next step (or finishes now if it
  // has no token left to decode; then true).
  bool kv_arrived(std::vector<SimRequest>& requests, int32_t rank, int64_t id, double now);

  std::optional<double> start_step(std::vector<SimRequest>& requests, double now);
  // Finished requests at the step's end `now`.
  void finish_step(std::vector<SimRequest>& requests, double now, std::vector<int64_t>& finished, double& output_tokens);
  bool stepping() const { return stepping_; }

  void fill_view(int32_t rank, routing::InstanceView& view) const;
  double kv_tokens_in_use() const;
  int64_t sequences_held() const;
  double busy_s() const { return busy_s_; }
  // Summed over the steps taken: divide by steps() for the mean step.
  const StepBreakdown& step_sum() const { return step_sum_; }
  int64_t steps() const { return step_; }
  double running_sum() const { return running_sum_; }  // sum over steps of running sequences
  // When the rank's link is next free for an incoming KV pull, and its reservation.
  double& link_free_at(int32_t rank) { return ranks_[size_t(rank)].link_free_s; }

 private:
  struct Finish {
    int64_t step;
    int64_t id;
    uint32_t generation;
    bool operator>(const Finish& o) const { return step != o.step ? step > o.step : id > o.id; }
  };
  struct Rank {
    std::deque<int64_t> waiting;   // routed or preempted, not admitted; preempted ones first
    int32_t pulling = 0;           // admitted, KV in flight
    double reserved = 0;           // KV tokens held by pulling and joining requests
    std::vector<int64_t> joining;  // KV arrived, join at the next step
    std::vector<int64_t> recomputing;  // re-admitted after preemption: prefill this step
    // The running batch: sum(join_context), sum(join_step), sum(join_remaining).
    int64_t running = 0;
    double context_at_join = 0, join_steps = 0, remaining_at_join = 0;
    std::priority_queue<Finish, std::vector<Finish>, std::greater<>> finishing;
    // Running requests by join, newest last, with their generation (stale entries skipped).
    std::vector<std::pair<int64_t, uint32_t>> order;
    double link_free_s = 0;
  };

  double context_sum(const Rank& k) const;
  double remaining_sum(const Rank& k) const;
  void join(Rank& k, SimRequest& r, double context);
  void preempt_until_fits(std::vector<SimRequest>& requests, Rank& k);
  bool running_now(const SimRequest& r, uint32_t generation) const;

  const CostModel& cost_;
  int32_t first_view_;
  double per_step_;
  int32_t draft_tokens_;
  int64_t capacity_;
  int32_t max_sequences_;
  std::vector<Rank> ranks_;
  std::vector<RankBatch> batches_;
  int64_t step_ = 0;
  bool stepping_ = false;
  StepBreakdown step_sum_;
  double step_start_ = 0, busy_s_ = 0, running_sum_ = 0;
};

}  // namespace moe::sim
