#pragma once
// Which rank of an expert-parallel group computes which routed expert of each MoE layer:
// a placement (docs/placement.md) whose devices are the group's ranks. Every rank builds the
// same map from the same placement, so every rank sends each (token, expert) pair to the
// same place without asking anyone.
#include <cstdint>
#include <string>
#include <vector>

#include "placement/placement.h"

namespace moe {

class ExpertMap {
 public:
  // Each expert once, in contiguous runs: expert e of every layer on rank e * ranks / experts.
  static ExpertMap even(int64_t moe_layers, int64_t experts, int32_t ranks);
  static placement::Placement even_placement(int64_t moe_layers, int64_t experts, int32_t ranks);
  // Throws moe::Error naming `source` when the placement is invalid or does not fit the
  // model (its layer count is not the model's MoE layer count) or the group (its device
  // count is not the number of ranks).
  static ExpertMap from_placement(const placement::Placement& p, int64_t moe_layers, int64_t experts, int32_t ranks,
                                  const std::string& source);

  int32_t ranks() const { return ranks_; }
  // The placement it was made from (for even(): even_placement()).
  const placement::Placement& placement() const { return placement_; }
  int64_t layers() const { return int64_t(holders_.size()); }
  int64_t experts() const { return experts_; }

  // The rank that computes `expert` of MoE layer `layer` for the token at `index` in rank
  // `home`'s step: `home` itself when it holds a replica, else one of the holders, picked by
  // a hash of (home, index, expert) so that a rank's tokens spread over the replicas.
  int32_t rank_for(int64_t layer, int32_t expert, int32_t home, int64_t index) const;
  bool holds(int64_t layer, int32_t rank, int32_t expert) const;
  // The experts of `layer` whose weights `rank` needs, ascending.
  const std::vector<int32_t>& experts_on(int64_t layer, int32_t rank) const;
  // Ranks holding `expert` in `layer`, ascending, each once.
  const std::vector<int32_t>& holders(int64_t layer, int32_t expert) const;

 private:
  explicit ExpertMap(placement::Placement p, int64_t experts);

  placement::Placement placement_;
  int64_t experts_ = 0;
  int32_t ranks_ = 1;
  std::vector<std::vector<std::vector<int32_t>>> holders_;  // [layer][expert] -> ranks
  std::vector<std::vector<std::vector<int32_t>>> on_rank_;  // [layer][rank] -> experts
};

}  // namespace moe
