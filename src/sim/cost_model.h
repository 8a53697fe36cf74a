#pragma once
// The time of one engine step of an expert-parallel instance, from the work in it.
//
// Every operation costs the larger of its compute time and its memory time, each at the
// hardware's peak times an efficiency factor (both data, from the hardware profile):
//
//   t(op) = max(flops / (peak[type] * eff_compute), bytes / (mem_bw * eff_memory))
//
// An instance's attention ranks each run their own batch; the MoE layers synchronise them
// (dispatch, experts, combine), so a layer takes the slowest rank's attention and dense
// part, plus the busiest device's experts, plus the all-to-all:
//
//   dense layer = max_r [t(attention_r) + t(projections_r) + t(dense FFN_r)] + layer overhead
//   MoE layer   = compute + comm                                  (one micro-batch)
//               = max(compute, comm) + min(compute, comm) / 2      (two, overlapped)
//     compute   = max_r [t(attention_r) + t(projections_r) + t(shared experts_r)] + t(experts_busiest device)
//   step        = sum of layers + MTP draft layers + t(LM head) + step overhead
//
// The busiest device's routed tokens are the mean times the layer's imbalance (the
// placement's busiest device load over its mean device load, from the planner on an
// expert-load trace: expert_balance.h). Its expert weights read are those of the experts
// it holds that at least one token visits.
#include <cstdint>
#include <span>
#include <vector>

#include "sim/profiles.h"
#include "sim/sim_config.h"

namespace moe::sim {

// What one attention rank runs in a step, accumulated sequence by sequence.
struct RankBatch {
  int64_t tokens = 0;      // new tokens (queries)
  int64_t logit_rows = 0;  // tokens whose logits are computed
  int64_t sequences = 0;
  double attention_flops = 0;  // per layer
  double kv_tokens_read = 0;   // per layer: KV positions the attention reads
  int64_t draft_tokens = 0;    // MTP: tokens the draft layer runs on, per draft pass
};

enum class Phase { prefill, decode, unified };

// Seconds; experts and comm are the parts of moe_layers spent on the busiest device's
// experts and on the all-to-all (overlapped with each other under two micro-batches).
struct StepBreakdown {
  double total = 0;
  double dense_layers = 0, moe_layers = 0, experts = 0, comm = 0, lm_head = 0, draft = 0, overhead = 0;
  StepBreakdown& operator+=(const StepBreakdown& o);
  StepBreakdown scaled(double f) const;
};

class CostModel {
 public:
  // layer_imbalance: busiest over mean device load per MoE layer (>= 1), one per MoE layer
  // (empty for a model without experts).
  CostModel(const SimConfig& config, const PoolConfig& pool, Phase phase, std::vector<double> layer_imbalance);

  // n_tokens new tokens of one sequence after `context` positions already in its KV.
  void add_sequence(RankBatch& batch, int64_t n_tokens, int64_t context, bool logits) const;
  // `sequences` decoding sequences, `tokens_each` new tokens each (1, or 1 + MTP drafts),
  // their contexts summing to `context_sum`.
  void add_decodes(RankBatch& batch, int64_t sequences, int64_t tokens_each, double context_sum) const;

  // One step of the instance: a batch per attention rank (ranks without work: empty).
  StepBreakdown step(std::span<const RankBatch> ranks) const;
  double step_seconds(std::span<const RankBatch> ranks) const { return step(ranks).total; }

  double kv_bytes_per_token() const;     // all layers of one rank's cache
  int64_t kv_capacity_tokens() const;    // per attention rank
  double weight_bytes_per_device() const;
  int32_t ranks() const { return pool_.attention_dp; }
  const PoolConfig& pool() const { return pool_; }
  const std::vector<double>& layer_imbalance() const { return imbalance_; }
  // Seconds to move `bytes` of KV between two devices over the chosen link.
  double transfer_seconds(double bytes, bool scale_up) const;

 private:
  double op_time(double flops, double bytes, const std::string& type, double eff_compute, double eff_memory) const;
  // Dispatch and combine of one MoE layer for `tokens` tokens sent by each device.
  double all_to_all(double tokens_per_device) const;
  double expert_time(double total_tokens, double imbalance) const;

  const SimConfig& c_;
  PoolConfig pool_;
  Phase phase_;
  std::vector<double> imbalance_;
  double wbytes_;
  std::string compute_;
  int32_t nodes_, per_node_;
};

}  // namespace moe::sim
