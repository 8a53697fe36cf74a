#pragma once
// Incremental re-placement: from the placement being served, reach a target balance on
// new loads with as few expert copies as possible.
//
// Two operations, both leaving every device's slot count unchanged:
//   re-replicate (1 copy): drop a spare replica of some expert (any layer) from device d and
//     load a new replica of an expert on a busiest device into d (in its own layer), which
//     moves redundancy to where it pays, across layers too;
//   swap (2 copies): exchange two replicas between devices of one layer.
// Greedy: each round applies the operation with the largest drop in the summed layer peaks
// per copy, among the layers furthest above their mean and the cheapest spare replicas to
// give up; it stops at the target balance, the move limit, or when nothing helps.
// Each layer keeps its holders per expert, replicas per device and heaviest devices, so a
// candidate is scored from the few devices it changes (a swap in O(1)), and a layer's best
// swap is only searched again after the layer changes.
#include <cstdint>

#include "placement/placement.h"
#include "placement/trace.h"

namespace moe::placement {

struct IncrementalOptions {
  double target_balance = 1.0;  // planning balance (window-summed loads) to stop at
  int64_t max_moves = -1;       // expert copies allowed; -1: no limit
};

struct IncrementalResult {
  Placement placement;
  int64_t moves = 0;  // count_moves(current, placement)
  double balance_before = 0, balance_after = 0;
};

// Throws moe::Error when `current` is invalid or does not match the loads' shape.
IncrementalResult plan_incremental(const LoadMatrix& load, const Placement& current, const IncrementalOptions& options = {});

}  // namespace moe::placement
