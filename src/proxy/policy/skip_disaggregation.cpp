#include "proxy/policy/skip_disaggregation.h"

#include <fmt/format.h>

#include <optional>

#include "proxy/policy/cost.h"
#include "proxy/policy/eligibility.h"

namespace moe::routing {

Decision skip_disaggregation(std::span<const InstanceView> instances, const RoutingRequest& request,
                             const PolicyConfig& config) {
  const int64_t limit = config.skip_disagg_max_uncached_tokens;
  if (limit <= 0) return {std::nullopt, false, "disaggregate", "skip-disaggregation is off"};

  std::optional<size_t> best;
  int free_count = 0;
  auto better = [&](size_t i, size_t b) {
    const InstanceView &v = instances[i], &w = instances[b];
    if (uncached_prompt_tokens(v, request) != uncached_prompt_tokens(w, request))
      return uncached_prompt_tokens(v, request) < uncached_prompt_tokens(w, request);
    return double(projected_token_load(v, request)) / v.weight < double(projected_token_load(w, request)) / w.weight;
  };
  for (size_t i : eligible_instances(instances, request, Stage::unified).indices) {
    if (instances[i].load.queued_prefill_tokens > 0) continue;
    ++free_count;
    if (!best || better(i, *best)) best = i;
  }
  if (!best) return {std::nullopt, false, "disaggregate", "no free unified instance"};

  const InstanceView& v = instances[*best];
  const int64_t uncached = uncached_prompt_tokens(v, request);
  if (uncached > limit)
    return {std::nullopt, false, "disaggregate",
            fmt::format("{} uncached tokens on the best of {} free unified instances ({}) > {}", uncached, free_count,
                        v.id, limit)};
  return {best, true, "skip_disaggregation",
          fmt::format("{}: free unified instance, {} of {} prompt tokens uncached <= {}", v.id, uncached,
                      request.prompt_tokens, limit)};
}

}  // namespace moe::routing
