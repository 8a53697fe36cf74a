#pragma once
// How long an instance takes to prefill a prompt, learned online from the prefills it
// reports: the cost policy's clock.
//
//   t(n, m) = fixed + per_token * n + per_pair * pairs(n, m)
//   pairs(n, m) = n * m + n * (n + 1) / 2
//
// for n new (uncached) tokens after m cached ones. The linear layers (dense and routed
// experts) cost the same per token; causal attention costs per (query, key) pair, which
// makes long prompts superlinear and makes a prefix hit save less than its share of the
// tokens (the new tokens still attend to the cached ones). Without a prefix this is the
// quadratic a + b*n + c*n^2.
//
// The fit is exponentially weighted least squares over the last `window` prefills, on the
// error relative to the curve (so a 100-token prefill counts as much as a 30,000-token
// one, and a prefill twice as slow as the curve weighs what one twice as fast does),
// solved by reweighting against the current curve a few times, with coefficients kept
// non-negative. A prior gives the curve's shape (how fixed, per-token and attention costs
// compare), scaled to the level the observations show, and never fades: one observation
// already sets the instance's speed, and a workload of one prompt length still gives a
// usable curve at other lengths. An observation far off the curve when it arrives (a
// prefill stalled behind a page-fault storm or a co-tenant, a bogus report) is
// down-weighted so that it cannot drag the curve. Deterministic: the same observations in
// the same order give the same fit.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace moe::routing {

double attention_pairs(int64_t new_tokens, int64_t cached_tokens);

struct PrefillTimeFit {
  // The prior's values, and so its shape: a GPU-class instance serving a large MoE (~10k
  // prompt tokens/s, attention ~10% of the time at 8k tokens).
  double fixed_s = 0.01;
  double per_token_s = 1e-4;
  double per_pair_s = 2e-9;
  // Prefills behind the curve; 0: the prior alone, which says nothing of this instance's
  // speed (see cost.h).
  int64_t observations = 0;

  double seconds(int64_t new_tokens, int64_t cached_tokens) const;
  // A queue holding `tokens` uncached tokens over `requests` requests, whose individual
  // sizes and hits the caller does not know: taken as that many equal, uncached prompts.
  // Equal sizes give the fewest attention pairs for the total, so this errs short.
  double queue_seconds(int64_t tokens, int64_t requests) const;
};

struct PrefillLatencyConfig {
  PrefillTimeFit prior;
  // The prior's pull, in observations' worth; the window's weights sum to about
  // 1 / (1 - decay).
  double prior_weight = 0.01;
  double decay = 0.98;   // per observation: the last ~50 prefills dominate
  int32_t window = 128;  // observations kept; the oldest weighs decay^127 = 8%
  // An observation whose |log(observed / predicted)| exceeds outlier_threshold times the
  // running typical |log error| gets its weight cut by the square of the excess ratio, so
  // that its pull stays bounded however far off it is.
  double outlier_threshold = 3.0;
  // The typical |log error| never counts as below this: timing jitter, so that after a
  // spell of clean data a genuine change in speed stops counting as outliers within about
  // ten prefills.
  double min_log_error = 0.05;
};

class PrefillLatencyModel {
 public:
  explicit PrefillLatencyModel(const PrefillLatencyConfig& config = {});

  // One finished prefill: its new and cached tokens and the engine's own prefill time
  // (without queueing; the cost policy adds the queue itself). A prefill without new
  // tokens or without a positive, finite time says nothing about speed and is not counted.
  void observe(int64_t new_tokens, int64_t cached_tokens, double seconds);

  const PrefillTimeFit& fit() const { return fit_; }
  int64_t observations() const { return observations_; }

 private:
  struct Observation {
    int64_t new_tokens, cached_tokens;
    double seconds;
    double trust;  // 1, or less for an outlier
  };

  void refit();

  PrefillLatencyConfig config_;
  std::vector<Observation> window_;  // a ring of config_.window: next_ is the oldest once full
  size_t next_ = 0;
  double typical_log_error_ = 1.0;  // before any data, a factor of e off is ordinary
  int64_t observations_ = 0;
  PrefillTimeFit fit_;
};

}  // namespace moe::routing
