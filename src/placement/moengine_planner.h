#pragma once
// moengine's placement planner. Four steps, each a pure function of the window's loads:
//
//  1. Redundancy across layers: the L * (devices * S - E) spare slots go one at a time to
//     the layer whose estimated cost drops most, so skewed layers get many replicas and
//     flat ones none. A layer's cost is estimated from its largest replica share m as
//     max(m, mean + granularity * m): the busiest device carries at least m, and a large
//     item also leaves packing slack and out-of-sample risk in proportion to its size.
//     Within a layer the replica goes to the expert with the largest load per replica.
//     Then spare slots move between layers one at a time while a quick list schedule of
//     the two layers gets cheaper (the estimate misjudges devices holding one or two
//     replicas), and the same refinement from EPLB's equal split is kept instead when its
//     list schedules are cheaper (layers all alike).
//  2. Packing, node then device: replicas heaviest first onto the lightest device that
//     does not hold the expert yet, preferring, among near-lightest devices, a node without
//     the expert (hot experts spread over nodes, so more visits stay local). Two starts:
//     the same count on every device (as EPLB) and free counts (a device may take more
//     slots in one layer than another); the one with the lower peak after step 3 is kept.
//  3. Local search per layer: moves and swaps of replicas off the busiest device while
//     that lowers it.
//  4. Budgets: devices are renumbered per layer (whole nodes, then devices within a node)
//     so the per-layer slot counts even out, and the few devices still over S * L hand a
//     replica to one under it where that raises the layer's peak least; a swap-only local
//     search then polishes each layer without changing any device's count.
// A Trace window is planned for a forecast of the next window (forecast.h), not its sum,
// and step 1 then counts each expert at its forecast plus `risk` times how far the window's
// steps strayed from it: the busiest device carries the largest replica share of each
// step, so an expert whose load swings needs a smaller share than a steady one of the same
// mean. Packing (steps 2-4) balances the forecast itself.
// The result is then compared with EPLB's plan on the same window and the better one kept,
// so moengine is never worse than the baseline on the data it plans from.
#include <cstdint>
#include <vector>

#include "placement/placement.h"
#include "placement/trace.h"

namespace moe::placement {

struct PlannerOptions {
  double granularity = 0.25;  // step 1's weight on the largest replica share
  int32_t groups = 8;         // expert groups, for the EPLB plan it is compared with
  bool compare_with_eplb = true;
  bool forecast = true;  // plan a Trace window for forecast_load's loads, not the window sum
  double risk = 0.5;     // Trace windows: step 1's weight on forecast_deviation
};

// Replicas per expert per layer (step 1): i32 [layers][experts], every entry >= 1 and at
// most devices, summing to devices * S * L.
std::vector<std::vector<int32_t>> allocate_redundancy(const LoadMatrix& load, const Topology& topo, double granularity);

// Plans from window-summed loads; the EPLB comparison uses planning_cost.
Placement plan_moengine(const LoadMatrix& load, const Topology& topo, const PlannerOptions& options = {});
// Plans from a window of a trace, for forecast_load's loads (options.forecast); the EPLB
// plan it is compared with gets the same loads, and the comparison uses evaluate()'s
// per-step cost on the window.
Placement plan_moengine(const Trace& trace, Window window, const Topology& topo, const PlannerOptions& options = {});

}  // namespace moe::placement
