#include "moe/gating.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/ops.h"

namespace moe {

void route_token(const GatingConfig& cfg, const float* logits, const float* bias, int32_t* experts,
                 float* weights, float* scratch) {
  const int n = cfg.n_experts;
  float* probs = scratch;
  float* selection = scratch + n;
  std::copy(logits, logits + n, probs);
  if (cfg.func == GatingFunc::Softmax) {
    softmax(probs, n);
  } else {
    for (int e = 0; e < n; ++e) probs[e] = 1.0f / (1.0f + std::exp(-probs[e]));
  }
  for (int e = 0; e < n; ++e) selection[e] = bias ? probs[e] + bias[e] : probs[e];

  if (cfg.n_group > 1) {
    const int per_group = n / cfg.n_group;
    float group_score[64];
    int32_t keep[64];
    if (cfg.n_group > 64) fail("router: {} expert groups is more than the supported 64", cfg.n_group);
    for (int g = 0; g < cfg.n_group; ++g) {
      const float* s = selection + g * per_group;
      float best = -std::numeric_limits<float>::infinity(), second = best;
      for (int i = 0; i < per_group; ++i) {
        if (s[i] > best) {
          second = best;
          best = s[i];
        } else if (s[i] > second) {
          second = s[i];
        }
      }
      // DeepSeek-V3 (sigmoid, noaux_tc) scores a group by its two best experts; V2's
      // group_limited_greedy (softmax) by its best one.
      group_score[g] = (cfg.func == GatingFunc::Sigmoid && per_group > 1) ? best + second : best;
    }
    top_k(group_score, cfg.n_group, cfg.topk_group, keep);
    bool kept[64] = {};
    for (int i = 0; i < cfg.topk_group; ++i) kept[keep[i]] = true;
    for (int g = 0; g < cfg.n_group; ++g) {
      if (kept[g]) continue;
      std::fill(selection + g * per_group, selection + (g + 1) * per_group,
                -std::numeric_limits<float>::infinity());
    }
  }

  top_k(selection, n, cfg.n_used, experts);
  float sum = 0.0f;
  for (int i = 0; i < cfg.n_used; ++i) {
    weights[i] = probs[experts[i]];
    sum += weights[i];
  }
  if (cfg.normalize) {
    const float denom = std::max(sum, 6.103515625e-5f);
    for (int i = 0; i < cfg.n_used; ++i) weights[i] /= denom;
  }
  if (cfg.scale != 0.0f) {
    for (int i = 0; i < cfg.n_used; ++i) weights[i] *= cfg.scale;
  }
}

}  // namespace moe
