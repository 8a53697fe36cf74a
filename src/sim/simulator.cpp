#include "sim/simulator.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <optional>
#include <queue>

#include "core/block_hash.h"
#include "core/error.h"
#include "kv_events/kv_index.h"
#include "proxy/policy/queue_order.h"
#include "proxy/policy/route.h"
#include "sim/decode_instance.h"
#include "sim/scheduler_instance.h"

namespace moe::sim {

namespace {

enum class EventKind { arrival, prefill_wake, prefill_step, decode_wake, decode_step, transfer_done };

struct Event {
  double t;
  uint64_t seq;  // insertion order: ties run first in, first out
  EventKind kind;
  int32_t target;  // instance, or decode view for transfers
  int64_t request;
  bool operator>(const Event& o) const { return t != o.t ? t > o.t : seq > o.seq; }
};

std::string view_id(const std::string& pool, int32_t instance, int32_t rank, int32_t ranks) {
  return ranks == 1 ? fmt::format("{}{}", pool, instance) : fmt::format("{}{}-rank{}", pool, instance, rank);
}

class Simulation {
 public:
  Simulation(const SimConfig& c, const std::vector<TracedRequest>& trace) : c_(c), workload_(c.workload, trace) {
    const Deployment& d = c.deployment;
    unified_ = d.unified.has_value();
    const PoolConfig& front = unified_ ? *d.unified : *d.prefill;
    const Phase front_phase = unified_ ? Phase::unified : Phase::prefill;
    front_balance_ = balance_for(front, int64_t(front.attention_dp) * front.max_batched_tokens / 4);
    front_cost_ = std::make_unique<CostModel>(c, front, front_phase, front_balance_.imbalance);
    shared_prefix_ = c.workload.prefix_groups > 0;
    for (int32_t i = 0; i < front.instances; ++i) {
      front_.push_back(std::make_unique<SchedulerInstance>(*front_cost_, unified_, int32_t(front_views_.size()), shared_prefix_));
      for (int32_t r = 0; r < front.attention_dp; ++r) {
        routing::InstanceView v;
        v.id = view_id(unified_ ? "unified" : "prefill", i, r, front.attention_dp);
        v.role = unified_ ? routing::InstanceRole::both : routing::InstanceRole::prefill;
        front_views_.push_back(v);
        if (shared_prefix_) {
          index_.add(v.id);
          (void)index_.reset(v.id, kv_events::KvSnapshot{0, front.block_size, {}});
        }
      }
    }
    kv_seq_.assign(front_views_.size(), 0);
    wake_s_ = c.hardware.wake_s;
    front_waking_.assign(front_.size(), false);
    if (!unified_) {
      const PoolConfig& dp = *d.decode;
      const int64_t tokens = int64_t(dp.attention_dp) * dp.max_sequences_per_rank() / 2 * (1 + d.mtp.draft_tokens);
      decode_balance_ = balance_for(dp, tokens);
      decode_cost_ = std::make_unique<CostModel>(c, dp, Phase::decode, decode_balance_.imbalance);
      for (int32_t i = 0; i < dp.instances; ++i) {
        decode_.push_back(std::make_unique<DecodeInstance>(*decode_cost_, int32_t(decode_views_.size()),
                                                           d.mtp.tokens_per_step(), d.mtp.draft_tokens));
        for (int32_t r = 0; r < dp.attention_dp; ++r) {
          routing::InstanceView v;
          v.id = view_id("decode", i, r, dp.attention_dp);
          v.role = routing::InstanceRole::decode;
          decode_views_.push_back(v);
        }
      }
    }
    decode_waking_.assign(decode_.size(), false);
    prefill_state_.rng = decode_state_.rng = c.workload.seed;
    if (shared_prefix_) {
      for (int32_t g = 0; g < c.workload.prefix_groups; ++g) {
        std::vector<int32_t> prefix(size_t(c.workload.prefix_tokens), -(g + 1));
        prefix_hashes_.push_back(prompt_block_hashes(prefix, size_t(front.block_size)));
        prefixes_.push_back(std::move(prefix));
      }
    }
    window_begin_ = c.workload.warmup_s;
    window_end_ = c.workload.duration_s > 0 ? c.workload.duration_s : 1e300;
  }

  SimResult run() {
    const auto wall0 = std::chrono::steady_clock::now();
    if (workload_.closed_loop()) {
      for (int32_t i = 0; i < c_.workload.arrival.clients; ++i) send_closed(0);
    } else {
      schedule_next_arrival();
    }
    while (!events_.empty()) {
      const Event e = events_.top();
      events_.pop();
      now_ = e.t;
      ++n_events_;
      switch (e.kind) {
        case EventKind::arrival:
          arrive(e.request);
          if (!workload_.closed_loop()) schedule_next_arrival();
          break;
        case EventKind::prefill_wake:
          front_waking_[size_t(e.target)] = false;
          start_front(e.target);
          break;
        case EventKind::prefill_step:
          prefill_step_done(e.target);
          break;
        case EventKind::decode_wake:
          decode_waking_[size_t(e.target)] = false;
          start_decode(e.target);
          break;
        case EventKind::decode_step:
          decode_step_done(e.target);
          break;
        case EventKind::transfer_done:
          transfer_done(e.target, e.request);
          break;
      }
    }
    SimResult out;
    out.events = n_events_;
    out.end_s = now_;
    out.window_begin_s = window_begin_;
    out.window_end_s = std::min(window_end_, last_finish_);
    out.routing = std::move(routing_counts_);
    out.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
    out.pools.push_back(front_result());
    if (!unified_) out.pools.push_back(decode_result());
    for (const auto& p : front_) {
      out.blocks_in_use_at_end += p->blocks_in_use();
      out.sequences_at_end += p->sequences_held();
      if (out.block_check.empty()) out.block_check = p->check_blocks();
    }
    for (const auto& d : decode_) {
      out.decode_kv_tokens_at_end += d->kv_tokens_in_use();
      out.sequences_at_end += d->sequences_held();
    }
    for (SimRequest& r : requests_) {
      if (r.done()) continue;
      r.rejected = true;
      r.reject_reason = "still waiting when nothing was left to happen";
      ++out.stalled;
    }
    out.requests = std::move(requests_);
    return out;
  }

 private:
  ExpertBalance balance_for(const PoolConfig& pool, int64_t tokens) const {
    return expert_balance(c_.model, pool, c_.hardware.devices_per_node, c_.workload.expert_trace, c_.workload.expert_skew,
                          tokens, c_.workload.seed);
  }

  void push(double t, EventKind kind, int32_t target, int64_t request) {
    events_.push(Event{t, next_seq_++, kind, target, request});
  }

  int64_t new_request(const RequestSpec& spec) {
    SimRequest r;
    r.id = int64_t(requests_.size());
    r.spec = spec;
    requests_.push_back(r);
    return r.id;
  }

  void schedule_next_arrival() {
    RequestSpec spec;
    if (workload_.next_arrival(spec)) push(spec.arrival_s, EventKind::arrival, 0, new_request(spec));
  }

  void send_closed(double t) {
    RequestSpec spec;
    if (workload_.next_closed(t, spec)) push(spec.arrival_s, EventKind::arrival, 0, new_request(spec));
  }

  void reject(SimRequest& r, const std::string& why) {
    r.rejected = true;
    r.reject_reason = why;
    ended(r);
  }

  void ended(SimRequest& r) {
    if (!r.rejected) last_finish_ = std::max(last_finish_, now_);
    if (workload_.closed_loop()) send_closed(now_);
  }

  void arrive(int64_t id) {
    SimRequest& r = requests_[size_t(id)];
    const int64_t whole = r.spec.prompt_tokens + r.spec.output_tokens;
    if (r.uncached_tokens() > front_cost_->kv_capacity_tokens() || (unified_ && whole > front_cost_->kv_capacity_tokens())) {
      reject(r, fmt::format("{} tokens exceed the {} KV tokens of a rank", unified_ ? whole : r.uncached_tokens(),
                            front_cost_->kv_capacity_tokens()));
      return;
    }
    if (!unified_ && whole > decode_cost_->kv_capacity_tokens()) {
      reject(r, fmt::format("{} tokens exceed the {} KV tokens of a decode rank", whole, decode_cost_->kv_capacity_tokens()));
      return;
    }
    // Behind requests already waiting for an instance it waits too: the queue is routed
    // again when an instance's load falls, so an arrival need not re-sort it.
    const bool waiting = !prefill_queue_.empty();
    prefill_queue_.push_back(id);
    if (!waiting) route_prefills();
  }

  routing::RoutingRequest routing_request(const SimRequest& r) const {
    return routing::RoutingRequest{std::to_string(r.id), r.spec.prompt_tokens, r.spec.output_tokens, r.spec.arrival_s};
  }

  void count(const char* leg, const std::string& reason) { ++routing_counts_[fmt::format("{}/{}", leg, reason)]; }

  // Routes queued requests in the proxy's queue order until one finds no instance.
  template <typename TryOne>
  void drain_queue(std::vector<int64_t>& queue, TryOne try_one) {
    while (!queue.empty()) {
      std::vector<size_t> order{0};
      if (queue.size() > 1) {
        std::vector<routing::RoutingRequest> waiting;
        waiting.reserve(queue.size());
        for (int64_t id : queue) waiting.push_back(routing_request(requests_[size_t(id)]));
        order = routing::order_queue(waiting, now_, policy_config_);
      }
      std::vector<bool> taken(queue.size(), false);
      bool blocked = false;
      for (size_t i : order) {
        if (!try_one(queue[i])) {
          blocked = true;
          break;
        }
        taken[i] = true;
      }
      std::vector<int64_t> rest;
      for (size_t i = 0; i < queue.size(); ++i)
        if (!taken[i]) rest.push_back(queue[i]);
      queue.swap(rest);
      if (blocked) break;
    }
  }

  void route_prefills() {
    if (c_.workload.timeout_s > 0) {
      std::erase_if(prefill_queue_, [&](int64_t id) {
        SimRequest& r = requests_[size_t(id)];
        if (now_ - r.spec.arrival_s <= c_.workload.timeout_s) return false;
        reject(r, "timed out waiting for an instance");
        return true;
      });
    }
    drain_queue(prefill_queue_, [&](int64_t id) {
      SimRequest& r = requests_[size_t(id)];
      fill_front_views(r);
      const routing::Decision d =
          routing::route_prefill(front_views_, routing_request(r), c_.deployment.policy, policy_config_, prefill_state_);
      count(unified_ ? "whole" : "prefill", d.reason);
      if (!d.instance) return false;
      const int32_t view = int32_t(*d.instance);
      const int32_t ranks = front_cost_->ranks();
      SchedulerInstance& inst = *front_[size_t(view / ranks)];
      r.prefill_view = view;
      static const std::vector<int32_t> none;
      if (inst.add(view % ranks, r, shared_prefix_ && r.spec.prefix_group >= 0 ? prefixes_[size_t(r.spec.prefix_group)] : none)) {
        kick_front(view / ranks);
      } else {
        ended(r);
      }
      return true;
    });
  }

  void fill_front_views(const SimRequest& r) {
    const int32_t ranks = front_cost_->ranks();
    for (size_t v = 0; v < front_views_.size(); ++v) {
      routing::InstanceView& view = front_views_[v];
      front_[v / size_t(ranks)]->fill_view(int32_t(v % size_t(ranks)), view);
      if (shared_prefix_) {
        view.matched_prefix_tokens =
            r.spec.prefix_group < 0 ? 0
                                    : int64_t(index_.matched_blocks(view.id, prefix_hashes_[size_t(r.spec.prefix_group)])) *
                                          front_cost_->pool().block_size;
      } else {
        view.matched_prefix_tokens = r.spec.cached_tokens;
      }
    }
  }

  void route_decodes() {
    drain_queue(decode_queue_, [&](int64_t id) {
      SimRequest& r = requests_[size_t(id)];
      const int32_t ranks = decode_cost_->ranks();
      for (size_t v = 0; v < decode_views_.size(); ++v) decode_[v / size_t(ranks)]->fill_view(int32_t(v % size_t(ranks)), decode_views_[v]);
      const routing::Decision d =
          routing::route_decode(decode_views_, routing_request(r), c_.deployment.policy, policy_config_, decode_state_);
      count("decode", d.reason);
      if (!d.instance) return false;
      const int32_t view = int32_t(*d.instance);
      r.decode_view = view;
      decode_[size_t(view / ranks)]->route(view % ranks, id);
      start_pulls(view / ranks);
      return true;
    });
  }

  void start_pulls(int32_t instance) {
    DecodeInstance& inst = *decode_[size_t(instance)];
    const int32_t ranks = decode_cost_->ranks();
    for (const auto& [rank, id] : inst.admit(requests_)) {
      const SimRequest& r = requests_[size_t(id)];
      double& free_at = inst.link_free_at(rank);
      const double bytes = double(r.spec.prompt_tokens) * decode_cost_->kv_bytes_per_token() / double(decode_cost_->pool().attention_tp);
      const double start = std::max(now_, free_at);
      free_at = start + decode_cost_->transfer_seconds(bytes, c_.deployment.kv_over_scale_up);
      push(free_at, EventKind::transfer_done, instance * ranks + rank, id);
    }
  }

  // New work for an instance. One that is stepping takes it into its next step; an idle
  // one wakes after the profile's wake time and gathers what arrives until then, as a
  // woken engine does (on a busy host that is when the burst's HTTP work is done).
  void kick_front(int32_t instance) {
    if (front_[size_t(instance)]->stepping() || front_waking_[size_t(instance)]) return;
    if (wake_s_ <= 0) return start_front(instance);
    front_waking_[size_t(instance)] = true;
    push(now_ + wake_s_, EventKind::prefill_wake, instance, 0);
  }

  void kick_decode(int32_t instance) {
    if (decode_[size_t(instance)]->stepping() || decode_waking_[size_t(instance)]) return;
    if (wake_s_ <= 0) return start_decode(instance);
    decode_waking_[size_t(instance)] = true;
    push(now_ + wake_s_, EventKind::decode_wake, instance, 0);
  }

  // A step that ends goes straight on to the next one while there is work, with no wake.
  void start_front(int32_t instance) {
    SchedulerInstance& inst = *front_[size_t(instance)];
    if (inst.stepping()) return;
    if (const std::optional<double> t = inst.start_step(requests_, now_)) push(now_ + *t, EventKind::prefill_step, instance, 0);
  }

  void start_decode(int32_t instance) {
    DecodeInstance& inst = *decode_[size_t(instance)];
    if (inst.stepping()) return;
    if (const std::optional<double> t = inst.start_step(requests_, now_)) push(now_ + *t, EventKind::decode_step, instance, 0);
  }

  bool in_window() const { return now_ >= window_begin_ && now_ <= window_end_; }

  void prefill_step_done(int32_t instance) {
    SchedulerInstance& inst = *front_[size_t(instance)];
    StepEvents ev;
    inst.finish_step(requests_, now_, ev);
    if (in_window()) {
      front_input_ += double(ev.prompt_tokens_done);
      front_output_ += double(ev.output_tokens);
    }
    if (shared_prefix_) {
      for (int32_t r = 0; r < inst.ranks(); ++r) {
        const int32_t view = inst.first_view() + r;
        std::vector<kv_events::KvEvent> events = inst.take_events(r);
        if (!events.empty()) (void)index_.apply(front_views_[size_t(view)].id, ++kv_seq_[size_t(view)], events);
      }
    }
    for (int64_t id : ev.finished) ended(requests_[size_t(id)]);
    if (!unified_) {
      for (int64_t id : ev.first_tokens) decode_queue_.push_back(id);
      route_decodes();
    }
    start_front(instance);
    route_prefills();
  }

  void transfer_done(int32_t decode_view, int64_t id) {
    SimRequest& r = requests_[size_t(id)];
    const int32_t ranks = front_cost_->ranks();
    front_[size_t(r.prefill_view / ranks)]->release(r.prefill_view % ranks, id);
    const int32_t dranks = decode_cost_->ranks();
    DecodeInstance& d = *decode_[size_t(decode_view / dranks)];
    if (d.kv_arrived(requests_, decode_view % dranks, id, now_)) ended(r);
    kick_decode(decode_view / dranks);
    kick_front(r.prefill_view / ranks);
    route_prefills();
  }

  void decode_step_done(int32_t instance) {
    DecodeInstance& inst = *decode_[size_t(instance)];
    std::vector<int64_t> finished;
    double tokens = 0;
    inst.finish_step(requests_, now_, finished, tokens);
    if (in_window()) decode_output_ += tokens;
    for (int64_t id : finished) ended(requests_[size_t(id)]);
    start_pulls(instance);
    start_decode(instance);
    route_decodes();
  }

  PoolResult pool_result(const std::string& name, const CostModel& cost, const ExpertBalance& balance) const {
    const PoolConfig& p = cost.pool();
    PoolResult r;
    r.name = name;
    r.instances = p.instances;
    r.devices = p.instances * p.devices;
    r.nodes = double(r.devices) / double(std::min(p.devices, c_.hardware.devices_per_node));
    r.ranks_per_instance = p.attention_dp;
    r.kv_capacity_tokens_per_rank = cost.kv_capacity_tokens();
    r.weight_gib_per_device = cost.weight_bytes_per_device() / (1024.0 * 1024 * 1024);
    r.balance = balance;
    return r;
  }

  PoolResult front_result() const {
    PoolResult r = pool_result(unified_ ? "unified" : "prefill", *front_cost_, front_balance_);
    double busy = 0;
    StepBreakdown sum;
    for (const auto& p : front_) {
      busy += p->busy_s();
      r.steps += p->steps();
      sum += p->step_sum();
    }
    r.mean_step = sum.scaled(r.steps > 0 ? 1.0 / double(r.steps) : 0);
    r.busy_fraction = now_ > 0 ? busy / (now_ * double(front_.size())) : 0;
    r.input_tokens = front_input_;
    r.output_tokens = front_output_;
    return r;
  }

  PoolResult decode_result() const {
    PoolResult r = pool_result("decode", *decode_cost_, decode_balance_);
    double busy = 0, running = 0;
    StepBreakdown sum;
    for (const auto& d : decode_) {
      busy += d->busy_s();
      r.steps += d->steps();
      running += d->running_sum();
      sum += d->step_sum();
    }
    r.mean_step = sum.scaled(r.steps > 0 ? 1.0 / double(r.steps) : 0);
    r.busy_fraction = now_ > 0 ? busy / (now_ * double(decode_.size())) : 0;
    r.mean_running_per_rank = r.steps > 0 ? running / double(r.steps) / double(decode_cost_->ranks()) : 0;
    r.output_tokens = decode_output_ + front_output_;
    return r;
  }

  const SimConfig& c_;
  WorkloadGenerator workload_;
  bool unified_ = false, shared_prefix_ = false;
  ExpertBalance front_balance_, decode_balance_;
  std::unique_ptr<CostModel> front_cost_, decode_cost_;
  std::vector<std::unique_ptr<SchedulerInstance>> front_;
  std::vector<std::unique_ptr<DecodeInstance>> decode_;
  double wake_s_ = 0;
  std::vector<bool> front_waking_, decode_waking_;
  std::vector<routing::InstanceView> front_views_, decode_views_;
  routing::PolicyConfig policy_config_;
  routing::RoutingState prefill_state_, decode_state_;
  kv_events::KvIndex index_;
  std::vector<uint64_t> kv_seq_;
  std::vector<std::vector<int32_t>> prefixes_;
  std::vector<std::vector<uint64_t>> prefix_hashes_;
  std::vector<SimRequest> requests_;
  std::vector<int64_t> prefill_queue_, decode_queue_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  uint64_t next_seq_ = 0;
  int64_t n_events_ = 0;
  double now_ = 0, last_finish_ = 0;
  double window_begin_ = 0, window_end_ = 0;
  double front_input_ = 0, front_output_ = 0, decode_output_ = 0;
  std::map<std::string, int64_t> routing_counts_;
};

}  // namespace

SimResult simulate(const SimConfig& config, const std::vector<TracedRequest>& trace) {
  return Simulation(config, trace).run();
}

}  // namespace moe::sim
