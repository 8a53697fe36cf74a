#pragma once
// Synthetic expert-load traces with the shape of real MoE routing: every token picks
// top_k distinct experts per layer, so a layer's loads sum to tokens * top_k per step.
//
// Popularity. Each layer ranks its experts by a latent score and gives the expert of rank
// k (from 0) popularity (k + 1)^-s, a Zipf law whose exponent s is the layer's skew:
// skew * U(1 - skew_spread, 1 + skew_spread), drawn once per layer.
// Drift. The latent scores are a stationary Gaussian process: every step each score keeps
// sqrt(1 - drift) of itself and gets sqrt(drift) of fresh noise, so the hot set turns over
// on a time scale of about 1 / drift steps (0: a fixed ranking).
// Bursts. With probability `burst` per step and layer, a random 1/32 of the experts get
// their popularity multiplied by burst_gain for that step (a batch of similar requests).
// Correlation. With probability `correlation` a token first picks groups_per_token of the
// `groups` expert groups (contiguous blocks, chosen with probability proportional to their
// popularity) and takes all its experts from them, as DeepSeek-V3's group-limited routing
// does; otherwise it picks experts by popularity alone.
#include <cstdint>

#include "placement/trace.h"

namespace moe::placement {

// The most loads (steps x layers x experts, 4 bytes each) a generated trace may hold: 8 GiB.
inline constexpr int64_t kMaxTraceLoads = int64_t(1) << 31;

struct TraceGenOptions {
  int64_t steps = 256;
  int64_t layers = 58;
  int64_t experts = 256;
  int32_t top_k = 8;
  int64_t tokens = 4096;  // tokens per step
  double skew = 0.6;
  double skew_spread = 0.5;
  double drift = 0.0005;
  double burst = 0.0;
  double burst_gain = 4.0;
  double correlation = 0.0;
  int32_t groups = 8;
  int32_t groups_per_token = 4;
  uint64_t seed = 1;
};

// Throws moe::Error for out-of-range options.
Trace generate_trace(const TraceGenOptions& options);

}  // namespace moe::placement
