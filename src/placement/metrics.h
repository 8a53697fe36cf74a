#pragma once
// Scoring a placement on a window of a load trace.
//
// A layer's device load is the sum over its slots of load(expert) / replicas(expert). The
// layers run one after another, so a step costs the sum over layers of the busiest
// device's load; the ideal is the mean device load. Locality assumes a token's attention
// runs on one node, tokens spread evenly over the nodes, and routing prefers a replica on
// the token's own node: a visit leaves the node when the node holds no replica of the
// expert, so remote share = sum over visits of (1 - nodes holding the expert / nodes).
#include <cstdint>
#include <vector>

#include "placement/placement.h"
#include "placement/trace.h"

namespace moe::placement {

struct Metrics {
  int64_t steps = 0;
  double cost = 0;          // sum over steps and layers of the busiest device's load
  // The lower bound: the same sum of the mean device load, which no placement can beat
  // (a layer's devices share its whole load) and enough replicas can approach.
  double ideal = 0;
  double balance = 0;       // ideal / cost (1 is perfect)
  double gap = 0;           // cost / ideal - 1: how far above the lower bound
  double remote_share = 0;  // share of expert visits that leave the token's node
  std::vector<double> layer_balance;  // per layer: its ideal / its cost
  std::vector<int32_t> layer_slots;   // physical slots per layer (E + the layer's redundancy)
};

// Throws moe::Error when the placement does not fit the trace (layers, experts) or is invalid.
Metrics evaluate(const Trace& trace, Window window, const Placement& p);

// Device loads of one layer for one vector of expert loads: f64 [devices].
std::vector<double> device_loads(const LayerPlacement& layer, int32_t devices, const double* expert_load, int64_t experts);

// Sum over layers of the busiest device's load under window-summed loads: what planners
// minimise (a proxy for evaluate's per-step cost).
double planning_cost(const LoadMatrix& load, const Placement& p);
double planning_balance(const LoadMatrix& load, const Placement& p);

// Expert copies to transfer to turn `from` into `to`: per layer and device, the replicas
// `to` holds that `from` does not (slot order within a device is free to change).
int64_t count_moves(const Placement& from, const Placement& to);

}  // namespace moe::placement
