#include "placement/incremental.h"

#include <algorithm>

#include "core/error.h"
#include "placement/layer_state.h"
#include "placement/metrics.h"

namespace moe::placement {
namespace {

constexpr size_t kLayersPerRound = 4;
constexpr size_t kVictims = 24;
constexpr size_t kTopDevices = 16;

// A layer's heaviest devices, so that "the peak once these few devices change" costs
// O(changes) instead of a scan of every device.
struct Peaks {
  std::vector<std::pair<double, int32_t>> top;  // (load, device), heaviest first

  void refresh(const LayerState& layer) {
    top.clear();
    for (int32_t d = 0; d < layer.devices(); ++d) top.emplace_back(layer.device_load(d), d);
    const size_t k = std::min(kTopDevices, top.size());
    std::partial_sort(top.begin(), top.begin() + std::ptrdiff_t(k), top.end(), std::greater<>());
    top.resize(k);
  }
  double peak() const { return top.front().first; }
};

// Load changes on a few devices of one layer.
struct Delta {
  std::vector<std::pair<int32_t, double>> change;  // (device, load difference)

  void add(int32_t d, double v) {
    for (auto& [dd, vv] : change) {
      if (dd == d) {
        vv += v;
        return;
      }
    }
    change.emplace_back(d, v);
  }
  // The expert's replica count going from `from` to `to`: its other holders re-split.
  void resplit(const LayerState& layer, int32_t e, int32_t from, int32_t to) {
    const double w = layer.expert_load(e), diff = w / to - w / from;
    for (const Replica& r : layer.replicas()) {
      if (r.expert == e) add(r.device, diff);
    }
  }
  double peak_after(const LayerState& layer, const Peaks& peaks) const {
    double best = -1;
    for (const auto& [load, d] : peaks.top) {
      if (std::none_of(change.begin(), change.end(), [&](const auto& c) { return c.first == d; })) {
        best = load;
        break;
      }
    }
    if (best < 0) {
      for (int32_t d = 0; d < layer.devices(); ++d) best = std::max(best, layer.device_load(d));
    }
    for (const auto& [d, v] : change) best = std::max(best, layer.device_load(d) + v);
    return best;
  }
};

// Dropping replica i (its expert keeps at least one other): the layer's new peak.
Delta drop(const LayerState& layer, size_t i) {
  const Replica r = layer.replicas()[i];
  const int32_t n = layer.replicas_of(r.expert);
  Delta d;
  d.resplit(layer, r.expert, n, n - 1);
  d.add(r.device, -layer.expert_load(r.expert) / (n - 1));
  return d;
}

struct Victim {
  double rise;  // how much the layer's peak grows without this replica
  size_t layer, index;
  int32_t device;
};

std::vector<Victim> victims_of(const LayerState& layer, const Peaks& peaks, size_t l) {
  std::vector<Victim> out;
  for (size_t i = 0; i < layer.replicas().size(); ++i) {
    const Replica& r = layer.replicas()[i];
    if (layer.replicas_of(r.expert) < 2) continue;
    out.push_back({drop(layer, i).peak_after(layer, peaks) - peaks.peak(), l, i, r.device});
  }
  return out;
}

}  // namespace

IncrementalResult plan_incremental(const LoadMatrix& load, const Placement& current, const IncrementalOptions& options) {
  check_placement(current, load.experts, "current placement");
  if (int64_t(current.layers.size()) != load.layers) {
    fail("the current placement has {} layers but the loads have {}", current.layers.size(), load.layers);
  }
  const Topology topo = current.topology();
  std::vector<LayerState> layers;
  std::vector<Peaks> peaks(size_t(load.layers));
  std::vector<std::vector<Victim>> victims(size_t(load.layers));
  double ideal = 0, cost = 0;
  for (int64_t l = 0; l < load.layers; ++l) {
    layers.emplace_back(load.row(l), load.experts, topo, current.layers[size_t(l)]);
    peaks[size_t(l)].refresh(layers.back());
    victims[size_t(l)] = victims_of(layers.back(), peaks[size_t(l)], size_t(l));
    ideal += layers.back().mean();
    cost += peaks[size_t(l)].peak();
  }
  IncrementalResult result;
  result.balance_before = cost > 0 ? ideal / cost : 1.0;
  const int64_t limit = options.max_moves < 0 ? INT64_MAX : options.max_moves;
  int64_t spent = 0;
  auto touch = [&](size_t l) {
    peaks[l].refresh(layers[l]);
    victims[l] = victims_of(layers[l], peaks[l], l);
  };

  while (spent < limit && cost > 0 && ideal / cost < options.target_balance) {
    std::vector<size_t> hot(layers.size());
    for (size_t l = 0; l < hot.size(); ++l) hot[l] = l;
    const size_t n_hot = std::min(kLayersPerRound, hot.size());
    std::partial_sort(hot.begin(), hot.begin() + std::ptrdiff_t(n_hot), hot.end(), [&](size_t a, size_t b) {
      return peaks[a].peak() - layers[a].mean() > peaks[b].peak() - layers[b].mean();
    });
    std::vector<Victim> cheap;
    for (const auto& v : victims) cheap.insert(cheap.end(), v.begin(), v.end());
    const size_t n_cheap = std::min(kVictims, cheap.size());
    std::partial_sort(cheap.begin(), cheap.begin() + std::ptrdiff_t(n_cheap), cheap.end(),
                      [](const Victim& a, const Victim& b) { return a.rise < b.rise; });
    cheap.resize(n_cheap);

    double best_gain = 1e-9 * cost;  // per copy
    enum { kNone, kReplicate, kSwap } best_kind = kNone;
    size_t best_layer = 0, best_i = 0, best_j = 0;
    Victim best_victim{};
    for (size_t h = 0; h < n_hot; ++h) {
      const size_t l = hot[h];
      const LayerState& layer = layers[l];
      const int32_t a = layer.busiest();
      const auto& reps = layer.replicas();
      for (size_t i = 0; i < reps.size(); ++i) {
        if (reps[i].device != a) continue;
        const int32_t e = reps[i].expert, n = layer.replicas_of(e);
        Delta grow;
        grow.resplit(layer, e, n, n + 1);
        if (spent + 1 <= limit) {
          for (const Victim& v : cheap) {
            if (layer.holds(v.device, e) || (v.layer == l && reps[v.index].expert == e)) continue;
            Delta d = grow;
            d.add(v.device, layer.expert_load(e) / (n + 1));
            double gain;
            if (v.layer == l) {
              const Delta gone = drop(layer, v.index);
              for (const auto& [dev, diff] : gone.change) d.add(dev, diff);
              gain = peaks[l].peak() - d.peak_after(layer, peaks[l]);
            } else {
              gain = peaks[l].peak() - d.peak_after(layer, peaks[l]) - v.rise;
            }
            if (gain > best_gain) best_gain = gain, best_kind = kReplicate, best_layer = l, best_i = i, best_victim = v;
          }
        }
        if (spent + 2 > limit) continue;
        const double x = layer.item_load(i);
        for (size_t j = 0; j < reps.size(); ++j) {
          const int32_t b = reps[j].device;
          const double y = layer.item_load(j);
          if (b == a || y >= x || layer.holds(b, e) || layer.holds(a, reps[j].expert)) continue;
          Delta d;
          d.add(a, y - x);
          d.add(b, x - y);
          const double gain = (peaks[l].peak() - d.peak_after(layer, peaks[l])) / 2;
          if (gain > best_gain) best_gain = gain, best_kind = kSwap, best_layer = l, best_i = i, best_j = j;
        }
      }
    }
    if (best_kind == kNone) break;
    const double before = peaks[best_layer].peak() + (best_kind == kReplicate && best_victim.layer != best_layer
                                                          ? peaks[best_victim.layer].peak()
                                                          : 0.0);
    if (best_kind == kSwap) {
      layers[best_layer].swap(best_i, best_j);
      touch(best_layer);
      cost += peaks[best_layer].peak() - before;
      spent += 2;
      continue;
    }
    const int32_t e = layers[best_layer].replicas()[best_i].expert;
    layers[best_victim.layer].remove(best_victim.index);
    layers[best_layer].add(e, best_victim.device);
    touch(best_layer);
    if (best_victim.layer != best_layer) touch(best_victim.layer);
    cost += peaks[best_layer].peak() + (best_victim.layer != best_layer ? peaks[best_victim.layer].peak() : 0.0) - before;
    spent += 1;
  }

  result.placement = Placement{current.nodes, current.devices_per_node, current.slots_per_device, {}};
  for (const LayerState& layer : layers) result.placement.layers.push_back(layer.placement());
  result.moves = count_moves(current, result.placement);
  result.balance_after = cost > 0 ? ideal / cost : 1.0;
  return result;
}

}  // namespace moe::placement
