#pragma once
// How unevenly an instance's devices share the routed experts' work, per MoE layer, from the
// real placement planner (src/placement): the busiest device's load over the mean device
// load, scored on steps of an expert-load trace the placement was not planned on.
#include <cstdint>
#include <string>
#include <vector>

#include "placement/metrics.h"
#include "sim/profiles.h"
#include "sim/sim_config.h"

namespace moe::sim {

struct ExpertBalance {
  std::vector<double> imbalance;  // per MoE layer: 1 / the planner's layer balance, >= 1
  double balance = 1;             // the planner's overall balance figure (ideal / cost)
  std::string planner;            // "moengine", "eplb" or "single device"
};

// The trace: `trace_file` (steps x MoE layers x experts .npy) or a synthetic one of Zipf
// skew `skew` with `tokens_per_step` tokens a step. The placement is planned on its first
// half and scored on its second.
ExpertBalance expert_balance(const ModelShape& model, const PoolConfig& pool, int32_t devices_per_node,
                             const std::string& trace_file, double skew, int64_t tokens_per_step, uint64_t seed);

}  // namespace moe::sim
