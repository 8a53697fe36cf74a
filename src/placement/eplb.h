#pragma once
// The baseline: DeepSeek's published expert-parallel load balancer (EPLB), re-implemented
// from its description. Every layer gets the same R = devices * S - E redundant slots and
// every device exactly S slots per layer.
//
//   balanced_packing   items sorted by weight (heaviest first; ties by index) go one by one
//                      to the lightest pack that still has room; each pack takes n / packs.
//   replicate_experts  each redundant slot goes to the expert with the largest
//                      load / replicas (ties to the lower index).
//   hierarchical       when the expert groups divide evenly over the nodes: pack whole
//                      groups to nodes, replicate within each node, then pack that node's
//                      physical experts onto its devices. Otherwise the global policy: one
//                      group, one node (replicate over all experts, pack to all devices).
#include <cstdint>
#include <vector>

#include "placement/placement.h"
#include "placement/trace.h"

namespace moe::placement {

struct Packing {
  std::vector<int32_t> pack;  // pack of each item
  std::vector<int32_t> rank;  // position of the item within its pack
};
// weight.size() must be a multiple of packs.
Packing balanced_packing(const std::vector<double>& weight, int32_t packs);

struct Replication {
  std::vector<int32_t> phy2log;  // logical expert of each physical expert; the first n are 0..n-1
  std::vector<int32_t> count;    // replicas per logical expert
};
Replication replicate_experts(const std::vector<double>& weight, int32_t physical);

// One layer: slots listed device by device (device d owns slots d*S .. d*S+S-1).
LayerPlacement eplb_layer(const double* load, int64_t experts, const Topology& topo, int32_t groups);
// Throws moe::Error for a topology that cannot hold every expert, or hierarchical mode
// with groups that do not divide the experts.
Placement plan_eplb(const LoadMatrix& load, const Topology& topo, int32_t groups);

}  // namespace moe::placement
