#include "sim/scheduler_instance.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace moe::sim {

SchedulerInstance::SchedulerInstance(const CostModel& cost, bool unified, int32_t first_view, bool shared_prefixes)
    : cost_(cost), unified_(unified), first_view_(first_view) {
  const PoolConfig& pool = cost.pool();
  const int64_t blocks = cost.kv_capacity_tokens() / pool.block_size;
  if (blocks < 1) fail("the KV cache of a rank holds less than one block of {} tokens", pool.block_size);
  SchedulerConfig config;
  config.max_num_batched_tokens = pool.max_batched_tokens;
  config.max_num_seqs = pool.max_sequences_per_rank();
  for (int32_t r = 0; r < pool.attention_dp; ++r) {
    ranks_.push_back(std::make_unique<Rank>(int32_t(std::min<int64_t>(blocks, std::numeric_limits<int32_t>::max())),
                                            pool.block_size, shared_prefixes, config));
    if (shared_prefixes) ranks_.back()->blocks.record_events();
  }
  batches_.resize(ranks_.size());
}

bool SchedulerInstance::add(int32_t rank, SimRequest& r, const std::vector<int32_t>& group_prefix) {
  Rank& k = *ranks_[size_t(rank)];
  Request req;
  req.id = r.id;
  req.max_tokens = unified_ ? r.spec.output_tokens : 1;
  req.keep_blocks = !unified_;
  // A token of its own first, so that no block of it matches another request's.
  const int64_t own = r.uncached_tokens() - int64_t(group_prefix.size());
  req.prompt.reserve(size_t(r.uncached_tokens()));
  req.prompt = group_prefix;
  req.prompt.push_back(int32_t(r.id % std::numeric_limits<int32_t>::max()));
  req.prompt.resize(size_t(r.uncached_tokens()), 0);
  if (own < 1) fail("internal: request {} has no tokens of its own", r.id);
  if (!k.scheduler.add(std::move(req))) {
    r.rejected = true;
    r.reject_reason = k.scheduler.reject_reason(r.id);
    k.scheduler.forget(r.id);
    return false;
  }
  k.prefill_left[r.id] = r.uncached_tokens();
  k.queued_prefill_tokens += r.uncached_tokens();
  if (unified_) k.remaining_output += r.spec.output_tokens;
  return true;
}

std::optional<double> SchedulerInstance::start_step(std::vector<SimRequest>& requests, double now) {
  bool any = false;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& k = *ranks_[i];
    RankBatch& b = batches_[i];
    b = RankBatch{};
    k.plan = k.scheduler.schedule();
    for (int64_t id : k.plan.preempted) {
      SimRequest& r = requests[size_t(id)];
      ++r.preemptions;
      // Recomputed from the start: its prompt and what it generated so far.
      const int64_t again = r.uncached_tokens() + k.generated[id];
      k.queued_prefill_tokens += again - k.prefill_left[id];
      k.prefill_left[id] = again;
    }
    if (k.plan.empty()) {
      k.scheduler.on_step_done(k.plan, std::vector<int32_t>{});
      continue;
    }
    any = true;
    for (const ScheduledSeq& s : k.plan.seqs) {
      SimRequest& r = requests[size_t(s.id)];
      cost_.add_sequence(b, s.n_tokens, r.spec.cached_tokens + s.pos0, s.produces_logits);
      if (r.prefill_start_s < 0) r.prefill_start_s = now;
      auto left = k.prefill_left.find(s.id);
      if (left != k.prefill_left.end()) {
        // Positions a prefix-cache hit skipped count as done too.
        const int64_t prompt = r.uncached_tokens() + (k.generated.count(s.id) ? k.generated[s.id] : 0);
        const int64_t now_left = std::clamp<int64_t>(prompt - (s.pos0 + s.n_tokens), 0, left->second);
        k.queued_prefill_tokens -= left->second - now_left;
        left->second = now_left;
        if (now_left == 0) k.prefill_left.erase(left);
      }
    }
  }
  if (!any) return std::nullopt;
  stepping_ = true;
  step_start_ = now;
  const StepBreakdown b = cost_.step(batches_);
  step_sum_ += b;
  return b.total;
}

void SchedulerInstance::finish_step(std::vector<SimRequest>& requests, double now, StepEvents& out) {
  stepping_ = false;
  busy_s_ += now - step_start_;
  ++steps_;
  for (auto& kp : ranks_) {
    Rank& k = *kp;
    if (k.plan.empty()) continue;
    std::vector<int32_t> sampled;
    for (const ScheduledSeq& s : k.plan.seqs)
      if (s.produces_logits) sampled.push_back(0);
    const std::vector<int64_t> finished = k.scheduler.on_step_done(k.plan, sampled);
    for (const ScheduledSeq& s : k.plan.seqs) {
      if (!s.produces_logits) continue;
      SimRequest& r = requests[size_t(s.id)];
      ++out.output_tokens;
      int64_t& generated = k.generated[s.id];
      ++generated;
      if (unified_) --k.remaining_output;
      if (generated == 1) {
        r.first_token_s = now;
        k.latency.observe(r.uncached_tokens(), r.spec.cached_tokens, now - r.prefill_start_s);
        out.first_tokens.push_back(s.id);
        out.prompt_tokens_done += r.spec.prompt_tokens;
      }
    }
    for (int64_t id : finished) {
      SimRequest& r = requests[size_t(id)];
      k.scheduler.forget(id);
      k.generated.erase(id);
      if (unified_) {
        r.finish_s = now;
        out.finished.push_back(id);
      }
    }
    k.plan = StepPlan{};
  }
}

void SchedulerInstance::release(int32_t rank, int64_t id) { ranks_[size_t(rank)]->blocks.free(id); }

void SchedulerInstance::fill_view(int32_t rank, routing::InstanceView& v) const {
  const Rank& k = *ranks_[size_t(rank)];
  v.capacity.max_sequences = cost_.pool().max_sequences_per_rank();
  v.capacity.max_kv_tokens = int64_t(k.blocks.n_blocks()) * k.blocks.block_size();
  v.load.queued_prefill_tokens = k.queued_prefill_tokens;
  v.load.prefill_requests = int32_t(k.prefill_left.size());
  v.load.waiting_requests = int32_t(k.scheduler.n_waiting());
  v.load.running_sequences = int32_t(k.scheduler.n_running());
  v.load.kv_tokens = int64_t(k.blocks.n_used()) * k.blocks.block_size();
  v.load.remaining_output_tokens = k.remaining_output;
  v.prefill_time = k.latency.fit();
}

int64_t SchedulerInstance::blocks_in_use() const {
  int64_t n = 0;
  for (const auto& k : ranks_) n += k->blocks.n_used();
  return n;
}

int64_t SchedulerInstance::sequences_held() const {
  int64_t n = 0;
  for (const auto& k : ranks_) n += int64_t(k->blocks.n_seqs());
  return n;
}

std::string SchedulerInstance::check_blocks() const {
  for (const auto& k : ranks_)
    if (std::string e = k->blocks.validate(); !e.empty()) return e;
  return "";
}

}  // namespace moe::sim
