#pragma once
// Expert selection (the router) for MoE layers, following llama.cpp's build_moe_ffn so
// GGUF models converted for it route identically (docs/architectures.md section 4):
//   probs      = softmax(logits) | sigmoid(logits)
//   selection  = probs + bias            (DeepSeek-V3's exp_probs_b; selection only)
//   groups     : score each of n_group groups (sigmoid: sum of its top-2 selection values
//                as V3 does; softmax: its best value as V2's group_limited_greedy does,
//                where llama.cpp uses top-2 too), keep the best topk_group groups
//   experts    = top-k of selection;  weights = probs of those experts
//   weights   /= sum(weights)  (norm, sum clamped below at 2^-14)
//   weights   *= scale         (when scale != 0)
#include <cstdint>

namespace moe {

enum class GatingFunc { Softmax, Sigmoid };

struct GatingConfig {
  int n_experts = 0;
  int n_used = 0;             // experts per token (top-k)
  GatingFunc func = GatingFunc::Softmax;
  int n_group = 1;            // > 1 enables group-limited selection
  int topk_group = 1;
  bool normalize = false;
  float scale = 0.0f;         // 0: weights are not scaled
};

// logits: f32 [n_experts] router output of one token; bias: f32 [n_experts] or null.
// Writes n_used expert ids (best first) and their weights. `scratch` holds 2*n_experts
// floats.
void route_token(const GatingConfig& cfg, const float* logits, const float* bias, int32_t* experts,
                 float* weights, float* scratch);

}  // namespace moe
