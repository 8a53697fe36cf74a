#pragma once
// How many tokens to draft for one request this step, from how its drafts fared so far.
// Drafts keep the output exact whatever they are, but verifying one costs: on MoE models
// each verified position routes to its own experts, so a step of 1 + k positions reads
// about 1 + cost * k times the weights of a plain step (docs/benchmarks.md measures cost
// near 0.4 on mid q8_0). With a per-position acceptance a, such a step yields
// 1 + a + ... + a^k tokens; the length chosen is the k in 0..max_k that gives the most
// tokens per unit of cost. a is estimated from the request's recent drafts (decayed counts
// of accepted and of rejected positions, one accepted prior). When that says not to draft,
// one token is still drafted every kProbeEvery steps, so a request whose text turns
// predictable is noticed.
#include <cstdint>

namespace moe {

class DraftLength {
 public:
  static constexpr int32_t kProbeEvery = 16;
  static constexpr double kDecay = 0.7;

  explicit DraftLength(double cost_per_draft = 0.4) : cost_(cost_per_draft) {}

  // The drafts to ask for this step, 0..max_k; called once per step the request decodes in.
  int32_t choose(int32_t max_k);
  // A step verified `drafted` drafts of the request and accepted the first `accepted`.
  void observe(int32_t drafted, int32_t accepted);
  // The per-position acceptance the choice is based on.
  double acceptance() const { return (accepted_ + 1.0) / (accepted_ + rejected_ + 1.0); }

 private:
  double cost_;
  double accepted_ = 0.0, rejected_ = 0.0;
  int32_t steps_without_ = 0;
};

}  // namespace moe
