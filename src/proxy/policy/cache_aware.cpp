#include "proxy/policy/cache_aware.h"

#include <fmt/format.h>

#include <algorithm>

#include "proxy/policy/least_load.h"

namespace moe::routing {

Decision cache_aware(std::span<const InstanceView> instances, std::span<const size_t> eligible,
                     const RoutingRequest& request, const PolicyConfig& config) {
  double max_load = request_load(instances[eligible[0]]), min_load = max_load;
  size_t best = eligible[0];
  for (size_t i : eligible) {
    const InstanceView& v = instances[i];
    max_load = std::max(max_load, request_load(v));
    min_load = std::min(min_load, request_load(v));
    const InstanceView& b = instances[best];
    if (v.matched_prefix_tokens > b.matched_prefix_tokens ||
        (v.matched_prefix_tokens == b.matched_prefix_tokens && request_load(v) < request_load(b)))
      best = i;
  }

  if (max_load - min_load > config.balance_abs_threshold && max_load > config.balance_rel_threshold * min_load) {
    Decision d = least_load(instances, eligible);
    d.reason = "imbalanced";
    d.detail += fmt::format("; loads {}..{} exceed the balance thresholds", min_load, max_load);
    return d;
  }
  const int64_t matched = std::min(instances[best].matched_prefix_tokens, request.prompt_tokens);
  const double ratio = request.prompt_tokens > 0 ? double(matched) / double(request.prompt_tokens) : 0.0;
  if (matched > 0 && ratio >= config.cache_threshold)
    return {best, false, "prefix_match",
            fmt::format("{}: {} of {} prompt tokens cached (ratio {:.2f} >= {})", instances[best].id, matched,
                        request.prompt_tokens, ratio, config.cache_threshold)};
  Decision d = least_load(instances, eligible);
  d.reason = "low_match";
  d.detail += fmt::format("; best prefix match {:.2f} of the prompt < {}", ratio, config.cache_threshold);
  return d;
}

}  // namespace moe::routing
