#pragma once
// The planner's working form of one layer: replicas as weighted items on devices, with the
// per-device loads and counts kept in step. Shared by the full planner and incremental mode.
#include <cstdint>
#include <vector>

#include "placement/placement.h"

namespace moe::placement {

struct Replica {
  int32_t expert;
  int32_t device;
};

class LayerState {
 public:
  // An empty layer: add replicas with add().
  LayerState(const double* expert_load, int64_t experts, const Topology& topo);
  LayerState(const double* expert_load, int64_t experts, const Topology& topo, const LayerPlacement& placed);

  int32_t devices() const { return int32_t(load_.size()); }
  const std::vector<Replica>& replicas() const { return replicas_; }
  double device_load(int32_t d) const { return load_[size_t(d)]; }
  int32_t device_count(int32_t d) const { return count_[size_t(d)]; }
  bool holds(int32_t d, int32_t e) const { return holds_[size_t(d) * size_t(experts_) + size_t(e)] != 0; }
  int32_t replicas_of(int32_t e) const { return copies_[size_t(e)]; }
  double expert_load(int32_t e) const { return expert_load_[size_t(e)]; }
  // What one replica of e carries.
  double share(int32_t e) const { return copies_[size_t(e)] > 0 ? expert_load_[size_t(e)] / copies_[size_t(e)] : 0.0; }
  double item_load(size_t i) const { return share(replicas_[i].expert); }
  int32_t busiest() const;
  double peak() const { return load_[size_t(busiest())]; }
  double mean() const { return total_ / devices(); }

  // Adding or removing a replica re-splits the expert's load over its replicas.
  void add(int32_t e, int32_t d);
  // Packing from a replica plan: fixes each expert's replica count first, so every item
  // already weighs its final share, then place() puts the planned replicas one by one.
  void plan_copies(const std::vector<int32_t>& copies) { copies_ = copies; }
  void place(int32_t e, int32_t d);
  void remove(size_t i);
  void move(size_t i, int32_t d);
  void swap(size_t i, size_t j);
  // Renumbers devices: device d becomes to[d].
  void relabel(const std::vector<int32_t>& to);

  LayerPlacement placement() const;

 private:
  void spread(int32_t e, double delta_share);

  int64_t experts_;
  std::vector<double> expert_load_;  // f64 [experts]
  double total_ = 0;
  std::vector<Replica> replicas_;
  std::vector<int32_t> copies_;  // replicas per expert
  std::vector<double> load_;     // f64 [devices]
  std::vector<int32_t> count_;   // replicas per device
  std::vector<uint8_t> holds_;   // [devices, experts]
};

// Greedy moves and swaps that lower the layer's busiest device until none does. A move may
// only raise a device's count up to `cap`; with allow_moves false only swaps run, so device
// counts stay as they are.
void improve_layer(LayerState& layer, int32_t cap, bool allow_moves);

}  // namespace moe::placement
