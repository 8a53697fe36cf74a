#include "sim/decode_instance.h"

#include <algorithm>
#include <cmath>

namespace moe::sim {

namespace {
// Admission leaves this share of the KV free for running sequences to grow into, as the
// engine's scheduler does (SchedulerConfig::watermark).
constexpr double kWatermark = 0.01;
}  // namespace

DecodeInstance::DecodeInstance(const CostModel& cost, int32_t first_view, double tokens_per_step, int32_t draft_tokens)
    : cost_(cost), first_view_(first_view), per_step_(tokens_per_step), draft_tokens_(draft_tokens),
      capacity_(cost.kv_capacity_tokens()), max_sequences_(cost.pool().max_sequences_per_rank()),
      ranks_(size_t(cost.pool().attention_dp)), batches_(ranks_.size()) {}

double DecodeInstance::context_sum(const Rank& k) const {
  return k.context_at_join + per_step_ * (double(k.running) * double(step_) - k.join_steps);
}

double DecodeInstance::remaining_sum(const Rank& k) const {
  return std::max(0.0, k.remaining_at_join - per_step_ * (double(k.running) * double(step_) - k.join_steps));
}

bool DecodeInstance::running_now(const SimRequest& r, uint32_t generation) const {
  return r.generation == generation && r.finish_s < 0 && !r.recompute;
}

std::vector<std::pair<int32_t, int64_t>> DecodeInstance::admit(std::vector<SimRequest>& requests) {
  std::vector<std::pair<int32_t, int64_t>> pulls;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& k = ranks_[i];
    while (!k.waiting.empty()) {
      SimRequest& r = requests[size_t(k.waiting.front())];
      const double need = r.recompute ? r.join_context : double(r.spec.prompt_tokens + 1);
      const int64_t held = k.running + k.pulling + int64_t(k.joining.size() + k.recomputing.size());
      if (held >= max_sequences_) break;
      const double used = context_sum(k) + k.reserved;
      // Alone, a request may use the whole cache (it was checked to fit at routing).
      if (held > 0 && used + need > double(capacity_) * (1 - kWatermark)) break;
      k.waiting.pop_front();
      k.reserved += need;
      if (r.recompute) {
        k.recomputing.push_back(r.id);
      } else {
        ++k.pulling;
        pulls.emplace_back(int32_t(i), r.id);
      }
    }
  }
  return pulls;
}

bool DecodeInstance::kv_arrived(std::vector<SimRequest>& requests, int32_t rank, int64_t id, double now) {
  Rank& k = ranks_[size_t(rank)];
  SimRequest& r = requests[size_t(id)];
  --k.pulling;
  if (r.spec.output_tokens <= 1) {
    k.reserved -= double(r.spec.prompt_tokens + 1);
    r.finish_s = now;
    return true;
  }
  k.joining.push_back(id);
  return false;
}

void DecodeInstance::join(Rank& k, SimRequest& r, double context) {
  const double remaining = double(r.spec.output_tokens - 1) - r.generated;
  k.reserved -= context;
  r.recompute = false;
  r.join_step = step_;
  r.join_context = context;
  r.join_remaining = std::max(remaining, 1.0);
  ++k.running;
  k.context_at_join += context;
  k.join_steps += double(step_);
  k.remaining_at_join += r.join_remaining;
  k.finishing.push({step_ + int64_t(std::ceil(r.join_remaining / per_step_ - 1e-9)), r.id, r.generation});
  k.order.emplace_back(r.id, r.generation);
}

void DecodeInstance::preempt_until_fits(std::vector<SimRequest>& requests, Rank& k) {
  const double growth = double(1 + draft_tokens_);
  while (k.running > 0 && context_sum(k) + k.reserved + double(k.running) * growth > double(capacity_)) {
    const auto [id, generation] = k.order.back();
    k.order.pop_back();
    SimRequest& r = requests[size_t(id)];
    if (!running_now(r, generation)) continue;
    const double advanced = per_step_ * double(step_ - r.join_step);
    --k.running;
    k.context_at_join -= r.join_context;
    k.join_steps -= double(r.join_step);
    k.remaining_at_join -= r.join_remaining;
    r.generated += advanced;
    r.join_context += advanced;  // the KV to recompute on re-admission
    r.recompute = true;
    ++r.generation;
    ++r.preemptions;
    k.waiting.push_front(id);
  }
}

std::optional<double> DecodeInstance::start_step(std::vector<SimRequest>& requests, double now) {
  bool any = false;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& k = ranks_[i];
    for (int64_t id : k.joining) join(k, requests[size_t(id)], double(requests[size_t(id)].spec.prompt_tokens + 1));
    k.joining.clear();
    preempt_until_fits(requests, k);
    RankBatch& b = batches_[i];
    b = RankBatch{};
    cost_.add_decodes(b, k.running, 1 + draft_tokens_, context_sum(k));
    for (int64_t id : k.recomputing) cost_.add_sequence(b, int64_t(requests[size_t(id)].join_context), 0, true);
    any = any || b.tokens > 0;
  }
  if (!any) return std::nullopt;
  stepping_ = true;
  step_start_ = now;
  const StepBreakdown b = cost_.step(batches_);
  step_sum_ += b;
  return b.total;
}

void DecodeInstance::finish_step(std::vector<SimRequest>& requests, double now, std::vector<int64_t>& finished,
                                 double& output_tokens) {
  stepping_ = false;
  busy_s_ += now - step_start_;
  ++step_;
  for (Rank& k : ranks_) {
    output_tokens += double(k.running) * per_step_;
    running_sum_ += double(k.running);
    for (int64_t id : k.recomputing) join(k, requests[size_t(id)], requests[size_t(id)].join_context);
    k.recomputing.clear();
    while (!k.finishing.empty() && k.finishing.top().step <= step_) {
      const Finish f = k.finishing.top();
      k.finishing.pop();
      SimRequest& r = requests[size_t(f.id)];
      if (!running_now(r, f.generation)) continue;
      --k.running;
      k.context_at_join -= r.join_context;
      k.join_steps -= double(r.join_step);
      k.remaining_at_join -= r.join_remaining;
      r.finish_s = now;
      finished.push_back(f.id);
    }
    if (k.running == 0) k.context_at_join = k.join_steps = k.remaining_at_join = 0;
    // Stale entries of finished requests would pile up in a long run; drop them when the
    // list is mostly stale.
    if (k.order.size() > 64 && k.order.size() > 4 * size_t(k.running)) {
      std::erase_if(k.order, [&](const std::pair<int64_t, uint32_t>& e) { return !running_now(requests[size_t(e.first)], e.second); });
    }
  }
}

void DecodeInstance::fill_view(int32_t rank, routing::InstanceView& v) const {
  const Rank& k = ranks_[size_t(rank)];
  v.capacity.max_sequences = max_sequences_;
  v.capacity.max_kv_tokens = capacity_;
  v.load.waiting_requests = int32_t(k.waiting.size());
  v.load.running_sequences = int32_t(k.running + k.pulling + int64_t(k.joining.size() + k.recomputing.size()));
  v.load.kv_tokens = int64_t(context_sum(k) + k.reserved);
  v.load.remaining_output_tokens = int64_t(remaining_sum(k));
}

double DecodeInstance::kv_tokens_in_use() const {
  double n = 0;
  for (const Rank& k : ranks_) n += context_sum(k) + k.reserved;
  return n;
}

int64_t DecodeInstance::sequences_held() const {
  int64_t n = 0;
  for (const Rank& k : ranks_) n += k.running + k.pulling + int64_t(k.waiting.size() + k.joining.size() + k.recomputing.size());
  return n;
}

}  // namespace moe::sim
