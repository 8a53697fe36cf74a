#include "proxy/policy/cost.h"

#include <fmt/format.h>

#include <algorithm>

namespace moe::routing {

double prefill_finish_s(const InstanceView& v, const PrefillTimeFit& speed, const RoutingRequest& request) {
  const int64_t uncached = uncached_prompt_tokens(v, request);
  const int64_t cached = std::max<int64_t>(0, request.prompt_tokens - uncached);
  return speed.queue_seconds(v.load.queued_prefill_tokens, v.load.prefill_requests) + speed.seconds(uncached, cached);
}

std::optional<PrefillTimeFit> observed_peers_speed(std::span<const InstanceView> instances,
                                                   std::span<const size_t> eligible) {
  PrefillTimeFit mean{0, 0, 0, 0};
  for (size_t i : eligible) {
    const PrefillTimeFit& f = instances[i].prefill_time;
    if (f.observations <= 0) continue;
    const double w = double(f.observations);
    mean.fixed_s += w * f.fixed_s;
    mean.per_token_s += w * f.per_token_s;
    mean.per_pair_s += w * f.per_pair_s;
    mean.observations += f.observations;
  }
  if (mean.observations == 0) return std::nullopt;
  const double total = double(mean.observations);
  mean.fixed_s /= total;
  mean.per_token_s /= total;
  mean.per_pair_s /= total;
  return mean;
}

const PrefillTimeFit& prefill_speed(const InstanceView& v, const std::optional<PrefillTimeFit>& peers) {
  return v.prefill_time.observations > 0 || !peers ? v.prefill_time : *peers;
}

int64_t projected_token_load(const InstanceView& v, const RoutingRequest& request) {
  return v.load.kv_tokens + v.load.remaining_output_tokens + request.prompt_tokens + request.expected_output_tokens;
}

Decision cost_prefill(std::span<const InstanceView> instances, std::span<const size_t> eligible,
                      const RoutingRequest& request, const PolicyConfig& config) {
  const std::optional<PrefillTimeFit> peers = observed_peers_speed(instances, eligible);
  auto own = [&](size_t i) {
    const int64_t uncached = uncached_prompt_tokens(instances[i], request);
    return prefill_speed(instances[i], peers).seconds(uncached, request.prompt_tokens - uncached);
  };
  auto cost = [&](size_t i) {
    return prefill_finish_s(instances[i], prefill_speed(instances[i], peers), request) + config.capacity_weight * own(i);
  };
  size_t best = eligible[0];
  double best_cost = cost(best);
  for (size_t i : eligible) {
    const double c = cost(i);
    if (c < best_cost || (c == best_cost && instances[i].matched_prefix_tokens > instances[best].matched_prefix_tokens)) {
      best = i;
      best_cost = c;
    }
  }
  const InstanceView& v = instances[best];
  const PrefillTimeFit& speed = prefill_speed(v, peers);
  const double queue = speed.queue_seconds(v.load.queued_prefill_tokens, v.load.prefill_requests);
  return {best, false, "min_cost",
          fmt::format("{}: cost {:.4f} s = queue {:.4f} s ({} tokens) + own {:.4f} s x (1 + {}) ({} of {} tokens uncached){}",
                      v.id, best_cost, queue, v.load.queued_prefill_tokens, own(best), config.capacity_weight,
                      uncached_prompt_tokens(v, request), request.prompt_tokens,
                      &speed == &v.prefill_time ? "" : ", at its observed peers' speed")};
}

Decision cost_decode(std::span<const InstanceView> instances, std::span<const size_t> eligible,
                     const RoutingRequest& request) {
  const bool fractions =
      std::all_of(eligible.begin(), eligible.end(), [&](size_t i) { return instances[i].capacity.max_kv_tokens > 0; });
  auto load = [&](size_t i) {
    const InstanceView& v = instances[i];
    const double capacity = fractions ? double(v.capacity.max_kv_tokens) : 1.0;
    return double(projected_token_load(v, request)) / (v.weight * capacity);
  };
  size_t best = eligible[0];
  double best_load = load(best);
  for (size_t i : eligible) {
    const double l = load(i);
    if (l < best_load ||
        (l == best_load && outstanding_requests(instances[i]) < outstanding_requests(instances[best]))) {
      best = i;
      best_load = l;
    }
  }
  const InstanceView& v = instances[best];
  return {best, false, "min_token_load",
          fmt::format("{}: {} tokens with this request, of {} KV capacity, weight {}", v.id,
                      projected_token_load(v, request),
                      fractions ? fmt::to_string(v.capacity.max_kv_tokens) : "unknown", v.weight)};
}

}  // namespace moe::routing
