#pragma once
// Every threshold the policies use, with its default and why.
#include <cstdint>

namespace moe::routing {

struct PolicyConfig {
  // cache_aware, with SGLang router's defaults so that the baseline is the one people run.
  // Load is outstanding requests / weight. The pool is imbalanced when
  //   max - min > balance_abs_threshold  and  max > balance_rel_threshold * min.
  double balance_abs_threshold = 64;
  double balance_rel_threshold = 1.5;
  // Go to the best prefix match only when it covers at least this share of the prompt.
  double cache_threshold = 0.3;

  // cost, prefill: the request's own prefill time counted this many times more on top of
  // its finish time, as the capacity it takes from the requests after it. With 0 cost is
  // greedy: a miss on an idle instance beats a hit behind a short queue, though the miss
  // takes several times the compute and evicts another prefix to cache this one. With 1 a
  // hit waits behind up to twice the compute it saves.
  double capacity_weight = 1.0;

  // cost, skip-disaggregation: a request whose uncached part on a free unified instance is
  // at most this many tokens runs whole there. Prefilling so few tokens stalls the
  // instance's decode batch for about one step, less than the KV hand-off and the second
  // hop cost the request. 0 never skips.
  int64_t skip_disagg_max_uncached_tokens = 256;

  // order_queue: a request waiting longer than this goes ahead of every shorter prompt, so
  // that shortest-first cannot starve a long prompt. Well under a typical 2-5 s TTFT SLO.
  double aging_bound_s = 1.0;
};

}  // namespace moe::routing
