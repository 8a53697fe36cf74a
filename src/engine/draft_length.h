#pragma once
// How many tokens to draft for one request this step, from how its drafts fared so far.
// Drafts keep the output exact whatever they are, but verifying one costs: on MoE models
// each verified position routes to its own experts, so a step of 1 + k positions per
// sequence reads and computes about 1 + cost * k times what a plain step does. With a
// per-position acceptance a, such a step yields 1 + a + ... + a^k tokens; the length
// chosen is the k in 0..max_k that gives the most tokens per unit of cost. a is estimated
// from the request's recent drafts: decayed counts of accepted and of rejected positions,
// plus one accepted as a prior. The prior keeps the estimate optimistic on purpose: a
// request that stops drafting learns nothing more but from probes, so an estimate that
// follows the counts alone stops too often on a few unlucky misses (measured: at an
// acceptance of 0.7 it drafted half as often and lost the gain). When no length pays, one
// token is still drafted after kProbeFirst steps, so a request whose text turns
// predictable is noticed; each probe that fails doubles the wait, up to kProbeLast steps,
// and any accepted draft resets it.
//
// The cost grows with the sequences decoded together: alone, a drafted position mostly
// adds its experts' bytes to a memory-bound step; in a batch that already reads most
// experts it adds compute that is no longer hidden behind memory. docs/benchmarks.md
// measures 0.4 alone and 0.5-0.55 at 16 sequences on mid q8_0; cost(n) moves from one to
// the other as 1 - 1/n.
#include <cstdint>

namespace moe {

class DraftLength {
 public:
  static constexpr int32_t kProbeFirst = 16, kProbeLast = 64;
  static constexpr double kDecay = 0.7;
  static constexpr double kCostAlone = 0.4, kCostBatched = 0.55;

  // A drafted position's cost, in plain steps, when n_seqs sequences decode together.
  static double cost(int64_t n_seqs) {
    return kCostAlone + (kCostBatched - kCostAlone) * (1.0 - 1.0 / double(n_seqs < 1 ? 1 : n_seqs));
  }

  // The drafts to ask for this step, 0..max_k, among n_seqs sequences decoding in it;
  // called once per step the request decodes in.
  int32_t choose(int32_t max_k, int64_t n_seqs = 1);
  // A step verified `drafted` drafts of the request and accepted the first `accepted`.
  void observe(int32_t drafted, int32_t accepted);
  // The per-position acceptance the choice is based on.
  double acceptance() const { return (accepted_ + 1.0) / (accepted_ + rejected_ + 1.0); }

 private:
  double accepted_ = 0.0, rejected_ = 0.0;
  int32_t steps_without_ = 0;
  int32_t probe_wait_ = kProbeFirst;
  bool probing_ = false;  // the last choice was a probe
};

}  // namespace moe
