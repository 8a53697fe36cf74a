#include "placement/metrics.h"

#include <algorithm>

#include "core/error.h"

namespace moe::placement {

std::vector<double> device_loads(const LayerPlacement& layer, int32_t devices, const double* expert_load, int64_t experts) {
  const std::vector<int32_t> n = replica_counts(layer, experts);
  std::vector<double> out(size_t(devices), 0.0);
  for (size_t s = 0; s < layer.slots.size(); ++s) {
    const int32_t e = layer.slots[s];
    out[size_t(layer.devices[s])] += expert_load[e] / n[size_t(e)];
  }
  return out;
}

Metrics evaluate(const Trace& trace, Window window, const Placement& p) {
  check_window(trace, window, "window");
  check_placement(p, trace.experts, "placement");
  if (int64_t(p.layers.size()) != trace.layers) {
    fail("the placement has {} layers but the trace has {}", p.layers.size(), trace.layers);
  }
  const int64_t E = trace.experts;
  const int32_t D = p.devices();
  Metrics m;
  m.steps = window.size();
  m.layer_balance.assign(size_t(trace.layers), 0.0);
  double visits = 0, remote = 0;
  for (int64_t l = 0; l < trace.layers; ++l) {
    const LayerPlacement& layer = p.layers[size_t(l)];
    m.layer_slots.push_back(int32_t(layer.slots.size()));
    const std::vector<int32_t> n = replica_counts(layer, E);
    std::vector<double> share(layer.slots.size());
    for (size_t s = 0; s < layer.slots.size(); ++s) share[s] = 1.0 / n[size_t(layer.slots[s])];
    std::vector<std::vector<char>> on_node(size_t(E), std::vector<char>(size_t(p.nodes), 0));
    for (size_t s = 0; s < layer.slots.size(); ++s) on_node[size_t(layer.slots[s])][size_t(layer.devices[s] / p.devices_per_node)] = 1;
    std::vector<double> away(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      const auto& seen = on_node[size_t(e)];
      away[size_t(e)] = 1.0 - double(std::count(seen.begin(), seen.end(), 1)) / p.nodes;
    }
    double layer_cost = 0, layer_ideal = 0;
    std::vector<double> dev(static_cast<size_t>(D));
    for (int64_t t = window.begin; t < window.end; ++t) {
      const float* load = trace.row(t, l);
      std::fill(dev.begin(), dev.end(), 0.0);
      for (size_t s = 0; s < layer.slots.size(); ++s) dev[size_t(layer.devices[s])] += load[layer.slots[s]] * share[s];
      double total = 0;
      for (int64_t e = 0; e < E; ++e) {
        total += load[e];
        remote += load[e] * away[size_t(e)];
      }
      visits += total;
      const double busiest = *std::max_element(dev.begin(), dev.end());
      layer_cost += busiest;
      layer_ideal += total / D;
    }
    m.cost += layer_cost;
    m.ideal += layer_ideal;
    m.layer_balance[size_t(l)] = layer_cost > 0 ? layer_ideal / layer_cost : 1.0;
  }
  m.balance = m.cost > 0 ? m.ideal / m.cost : 1.0;
  m.gap = m.ideal > 0 ? m.cost / m.ideal - 1.0 : 0.0;
  m.remote_share = visits > 0 ? remote / visits : 0.0;
  return m;
}

double planning_cost(const LoadMatrix& load, const Placement& p) {
  double cost = 0;
  for (int64_t l = 0; l < load.layers; ++l) {
    const std::vector<double> dev = device_loads(p.layers[size_t(l)], p.devices(), load.row(l), load.experts);
    cost += *std::max_element(dev.begin(), dev.end());
  }
  return cost;
}

double planning_balance(const LoadMatrix& load, const Placement& p) {
  double total = 0;
  for (double v : load.load) total += v;
  const double cost = planning_cost(load, p);
  return cost > 0 ? total / p.devices() / cost : 1.0;
}

int64_t count_moves(const Placement& from, const Placement& to) {
  if (from.layers.size() != to.layers.size()) {
    fail("cannot count moves between placements of {} and {} layers", from.layers.size(), to.layers.size());
  }
  int64_t moves = 0;
  for (size_t l = 0; l < to.layers.size(); ++l) {
    auto held = [](const LayerPlacement& layer) {
      std::vector<std::pair<int32_t, int32_t>> v;
      for (size_t s = 0; s < layer.slots.size(); ++s) v.emplace_back(layer.devices[s], layer.slots[s]);
      std::sort(v.begin(), v.end());
      return v;
    };
    const auto a = held(from.layers[l]), b = held(to.layers[l]);
    std::vector<std::pair<int32_t, int32_t>> added;
    std::set_difference(b.begin(), b.end(), a.begin(), a.end(), std::back_inserter(added));
    moves += int64_t(added.size());
  }
  return moves;
}

}  // namespace moe::placement
