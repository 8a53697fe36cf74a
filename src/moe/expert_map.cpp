#include "moe/expert_map.h"

#include <algorithm>

#include "core/error.h"

namespace moe {

namespace {

uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

ExpertMap::ExpertMap(placement::Placement p, int64_t experts)
    : placement_(std::move(p)), experts_(experts), ranks_(placement_.devices()) {
  holders_.assign(placement_.layers.size(), std::vector<std::vector<int32_t>>(size_t(experts)));
  on_rank_.assign(placement_.layers.size(), std::vector<std::vector<int32_t>>(size_t(ranks_)));
  for (size_t l = 0; l < placement_.layers.size(); ++l) {
    const placement::LayerPlacement& lp = placement_.layers[l];
    for (size_t s = 0; s < lp.slots.size(); ++s) holders_[l][size_t(lp.slots[s])].push_back(lp.devices[s]);
    for (int32_t e = 0; e < int32_t(experts); ++e) {
      auto& h = holders_[l][size_t(e)];
      std::sort(h.begin(), h.end());
      h.erase(std::unique(h.begin(), h.end()), h.end());
      for (const int32_t r : h) on_rank_[l][size_t(r)].push_back(e);
    }
  }
}

placement::Placement ExpertMap::even_placement(int64_t moe_layers, int64_t experts, int32_t ranks) {
  if (ranks < 1) fail("expert parallelism needs at least one rank, not {}", ranks);
  if (experts < ranks) fail("{} ranks cannot share {} experts: every rank needs at least one", ranks, experts);
  placement::Placement p;
  p.nodes = 1;
  p.devices_per_node = ranks;
  p.slots_per_device = int32_t((experts + ranks - 1) / ranks);
  placement::LayerPlacement layer;
  for (int64_t e = 0; e < experts; ++e) {
    layer.slots.push_back(int32_t(e));
    layer.devices.push_back(int32_t(e * ranks / experts));
  }
  p.layers.assign(size_t(moe_layers), layer);
  return p;
}

ExpertMap ExpertMap::even(int64_t moe_layers, int64_t experts, int32_t ranks) {
  return ExpertMap(even_placement(moe_layers, experts, ranks), experts);
}

ExpertMap ExpertMap::from_placement(const placement::Placement& p, int64_t moe_layers, int64_t experts, int32_t ranks,
                                    const std::string& source) {
  placement::check_placement(p, experts, source);
  if (int64_t(p.layers.size()) != moe_layers) {
    fail("{}: the placement has {} layers but the model has {} MoE layers", source, p.layers.size(), moe_layers);
  }
  if (p.devices() != ranks) {
    fail("{}: the placement is for {} devices ({} nodes x {}) but the expert-parallel group has {} ranks", source,
         p.devices(), p.nodes, p.devices_per_node, ranks);
  }
  return ExpertMap(p, experts);
}

int32_t ExpertMap::rank_for(int64_t layer, int32_t expert, int32_t home, int64_t index) const {
  const std::vector<int32_t>& h = holders(layer, expert);
  if (std::binary_search(h.begin(), h.end(), home)) return home;
  if (h.size() == 1) return h[0];
  const uint64_t key = (uint64_t(uint32_t(home)) << 40) ^ (uint64_t(index) << 12) ^ uint64_t(uint32_t(expert));
  return h[size_t(mix(key) % h.size())];
}

bool ExpertMap::holds(int64_t layer, int32_t rank, int32_t expert) const {
  const std::vector<int32_t>& h = holders(layer, expert);
  return std::binary_search(h.begin(), h.end(), rank);
}

const std::vector<int32_t>& ExpertMap::experts_on(int64_t layer, int32_t rank) const {
  if (layer < 0 || layer >= layers() || rank < 0 || rank >= ranks_) {
    fail("expert map: no layer {} or rank {} (layers {}, ranks {})", layer, rank, layers(), ranks_);
  }
  return on_rank_[size_t(layer)][size_t(rank)];
}

const std::vector<int32_t>& ExpertMap::holders(int64_t layer, int32_t expert) const {
  if (layer < 0 || layer >= layers() || expert < 0 || expert >= experts_) {
    fail("expert map: no layer {} or expert {} (layers {}, experts {})", layer, expert, layers(), experts_);
  }
  return holders_[size_t(layer)][size_t(expert)];
}

}  // namespace moe
