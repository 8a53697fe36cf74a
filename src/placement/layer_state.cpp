#include "placement/layer_state.h"

#include <algorithm>

namespace moe::placement {

LayerState::LayerState(const double* expert_load, int64_t experts, const Topology& topo)
    : experts_(experts),
      expert_load_(expert_load, expert_load + experts),
      copies_(size_t(experts), 0),
      load_(size_t(topo.devices()), 0.0),
      count_(size_t(topo.devices()), 0),
      holds_(size_t(topo.devices()) * size_t(experts), 0) {
  for (double v : expert_load_) total_ += v;
}

LayerState::LayerState(const double* expert_load, int64_t experts, const Topology& topo, const LayerPlacement& placed)
    : LayerState(expert_load, experts, topo) {
  for (size_t s = 0; s < placed.slots.size(); ++s) add(placed.slots[s], placed.devices[s]);
}

int32_t LayerState::busiest() const { return int32_t(std::max_element(load_.begin(), load_.end()) - load_.begin()); }

void LayerState::spread(int32_t e, double delta_share) {
  for (const Replica& r : replicas_) {
    if (r.expert == e) load_[size_t(r.device)] += delta_share;
  }
}

void LayerState::add(int32_t e, int32_t d) {
  const double before = share(e);
  ++copies_[size_t(e)];
  spread(e, share(e) - before);
  place(e, d);
}

void LayerState::place(int32_t e, int32_t d) {
  replicas_.push_back({e, d});
  load_[size_t(d)] += share(e);
  ++count_[size_t(d)];
  ++holds_[size_t(d) * size_t(experts_) + size_t(e)];
}

void LayerState::remove(size_t i) {
  const Replica r = replicas_[i];
  load_[size_t(r.device)] -= share(r.expert);
  --count_[size_t(r.device)];
  --holds_[size_t(r.device) * size_t(experts_) + size_t(r.expert)];
  replicas_.erase(replicas_.begin() + std::ptrdiff_t(i));
  const double before = share(r.expert);
  --copies_[size_t(r.expert)];
  spread(r.expert, share(r.expert) - before);
}

void LayerState::move(size_t i, int32_t d) {
  Replica& r = replicas_[i];
  const double x = share(r.expert);
  load_[size_t(r.device)] -= x;
  --count_[size_t(r.device)];
  --holds_[size_t(r.device) * size_t(experts_) + size_t(r.expert)];
  r.device = d;
  load_[size_t(d)] += x;
  ++count_[size_t(d)];
  ++holds_[size_t(d) * size_t(experts_) + size_t(r.expert)];
}

void LayerState::swap(size_t i, size_t j) {
  const int32_t di = replicas_[i].device, dj = replicas_[j].device;
  move(i, dj);
  move(j, di);
}

void LayerState::relabel(const std::vector<int32_t>& to) {
  std::vector<double> load(load_.size());
  std::vector<int32_t> count(count_.size());
  std::vector<uint8_t> holds(holds_.size());
  for (size_t d = 0; d < load_.size(); ++d) {
    load[size_t(to[d])] = load_[d];
    count[size_t(to[d])] = count_[d];
    std::copy_n(holds_.begin() + std::ptrdiff_t(d * size_t(experts_)), experts_,
                holds.begin() + std::ptrdiff_t(size_t(to[d]) * size_t(experts_)));
  }
  for (Replica& r : replicas_) r.device = to[size_t(r.device)];
  load_ = std::move(load);
  count_ = std::move(count);
  holds_ = std::move(holds);
}

LayerPlacement LayerState::placement() const {
  std::vector<Replica> sorted = replicas_;
  std::stable_sort(sorted.begin(), sorted.end(), [](const Replica& a, const Replica& b) { return a.device < b.device; });
  LayerPlacement out;
  for (const Replica& r : sorted) {
    out.slots.push_back(r.expert);
    out.devices.push_back(r.device);
  }
  return out;
}

void improve_layer(LayerState& layer, int32_t cap, bool allow_moves) {
  const auto& reps = layer.replicas();
  const size_t limit = 8 * reps.size() + 64;
  for (size_t iter = 0; iter < limit; ++iter) {
    const int32_t a = layer.busiest();
    const double peak = layer.device_load(a);
    double best = peak * (1.0 - 1e-9);
    size_t best_i = reps.size(), best_j = reps.size();
    int32_t best_dest = -1;
    for (size_t i = 0; i < reps.size(); ++i) {
      if (reps[i].device != a) continue;
      const int32_t ei = reps[i].expert;
      const double x = layer.item_load(i);
      if (allow_moves) {
        for (int32_t b = 0; b < layer.devices(); ++b) {
          if (b == a || layer.device_count(b) >= cap || layer.holds(b, ei)) continue;
          const double p = std::max(peak - x, layer.device_load(b) + x);
          if (p < best) best = p, best_i = i, best_j = reps.size(), best_dest = b;
        }
      }
      for (size_t j = 0; j < reps.size(); ++j) {
        const int32_t b = reps[j].device;
        if (b == a) continue;
        const double y = layer.item_load(j);
        if (y >= x || layer.holds(b, ei) || layer.holds(a, reps[j].expert)) continue;
        const double p = std::max(peak - x + y, layer.device_load(b) + x - y);
        if (p < best) best = p, best_i = i, best_j = j, best_dest = -1;
      }
    }
    if (best_i == reps.size()) return;
    if (best_dest >= 0) layer.move(best_i, best_dest);
    else layer.swap(best_i, best_j);
  }
}

}  // namespace moe::placement
