#pragma once
// A simulated instance whose batches the engine's own scheduler forms: each attention rank
// runs a real moe::Scheduler over a real BlockManager (chunked prefill under the token
// budget, prefix-cache hits, admission, preemption by recompute), and the cost model times
// the step the ranks take together. Serves prefill instances (a request ends with its
// first token and keeps its KV until D has pulled it) and unified ones (whole requests).
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/block_manager.h"
#include "engine/scheduler.h"
#include "proxy/policy/instance_view.h"
#include "proxy/policy/prefill_latency_model.h"
#include "sim/cost_model.h"
#include "sim/sim_request.h"

namespace moe::sim {

struct StepEvents {
  std::vector<int64_t> first_tokens;  // requests whose first token this step produced
  std::vector<int64_t> finished;      // unified: requests complete
  int64_t output_tokens = 0;          // tokens produced (first tokens included)
  int64_t prompt_tokens_done = 0;     // whole prompts (cached part included) finished prefilling
};

class SchedulerInstance {
 public:
  // The instance's ranks are routing views first_view .. first_view + ranks - 1. Without
  // shared prefixes every prompt is unique, so prefix caching (and its KV events) is off:
  // it could never hit, and would only cost the simulation time.
  SchedulerInstance(const CostModel& cost, bool unified, int32_t first_view, bool shared_prefixes);

  int32_t ranks() const { return int32_t(ranks_.size()); }
  int32_t first_view() const { return first_view_; }
  // Queues a request at a rank: its prompt is group_prefix (shared-prefix groups) then
  // tokens of its own; a prompt_hit_rate hit is not submitted, only counted as context.
  // False (and the request rejected) when it can never fit the rank's KV cache.
  bool add(int32_t rank, SimRequest& r, const std::vector<int32_t>& group_prefix);
  // Plans the next step on every rank; its duration, or none when no rank has work.
  std::optional<double> start_step(std::vector<SimRequest>& requests, double now);
  // Commits the step started last, at its end `now`.
  void finish_step(std::vector<SimRequest>& requests, double now, StepEvents& out);
  bool stepping() const { return stepping_; }
  // Prefill instances: the request's KV has been pulled; its blocks go back to the pool.
  void release(int32_t rank, int64_t id);

  void fill_view(int32_t rank, routing::InstanceView& view) const;
  std::vector<kv_events::KvEvent> take_events(int32_t rank) { return ranks_[size_t(rank)]->blocks.take_events(); }
  const routing::PrefillLatencyModel& latency(int32_t rank) const { return ranks_[size_t(rank)]->latency; }
  int64_t blocks_in_use() const;
  int64_t sequences_held() const;
  double busy_s() const { return busy_s_; }
  // Summed over the steps taken: divide by steps() for the mean step.
  const StepBreakdown& step_sum() const { return step_sum_; }
  int64_t steps() const { return steps_; }
  std::string check_blocks() const;  // BlockManager::validate of every rank

 private:
  struct Rank {
    Rank(int32_t n_blocks, int32_t block_size, bool prefix_caching, const SchedulerConfig& config)
        : blocks(n_blocks, block_size, prefix_caching), scheduler(config, blocks) {}
    BlockManager blocks;
    Scheduler scheduler;
    routing::PrefillLatencyModel latency;
    StepPlan plan;
    std::unordered_map<int64_t, int64_t> prefill_left;  // uncached prompt tokens not yet prefilled
    std::unordered_map<int64_t, int64_t> generated;     // unified: output tokens so far
    int64_t queued_prefill_tokens = 0;
    int64_t remaining_output = 0;
  };

  const CostModel& cost_;
  bool unified_;
  int32_t first_view_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<RankBatch> batches_;
  bool stepping_ = false;
  StepBreakdown step_sum_;
  double step_start_ = 0, busy_s_ = 0;
  int64_t steps_ = 0;
};

}  // namespace moe::sim
